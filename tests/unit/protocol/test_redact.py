"""Redaction (issue 33 item 5): ``<private>`` spans and likely secrets never leave the events reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.observer.transcript import transcript_entries
from persistence.files.events_reader import iter_events, read_event_window
from persistence.settings.parse import settings_from_mapping
from protocol.errors import SettingsError
from protocol.redact import DEFAULT_REDACTOR, Redactor, compile_custom_patterns
from protocol.source_text import event_search_text

SECRETS = {
    "api-key": ["sk-ant-api03-" + "a1B2" * 8, "sk-proj-" + "Xy9" * 10, "sk-" + "q" * 40],
    "token": [
        "ghp_" + "A" * 36,
        "github_pat_" + "11ABCDEFG0" * 4,
        "xoxb-123456789012-abcdefABCDEF",
        "Authorization: Bearer abcDEF123456789xyz",
        "bearer " + "t0k3n" * 6,
    ],
    "aws-key": ["AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A"],
    "jwt": ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"],
    "private-key": [
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"
    ],
    "password": ["postgres://admin:s3cr3t-pass@db.internal:5432/app"],
    "secret": ["password=hunter2hunter2", "client_secret: 'zzTopSecret99'"],
}


@pytest.mark.parametrize(("kind", "secret"), [(kind, s) for kind, values in SECRETS.items() for s in values])
def test_each_built_in_pattern_masks_its_secret(kind: str, secret: str) -> None:
    masked = DEFAULT_REDACTOR.text(f"before {secret} after")
    assert f"[redacted:{kind}]" in masked
    core = secret.split("://")[-1].split("@")[0].split(":")[-1] if kind == "password" else secret[-12:]
    assert core not in masked and masked.startswith("before ") and masked.endswith(" after")


@pytest.mark.parametrize(
    "benign",
    [
        "Service uses JWT tokens for API authentication",
        "the password policy requires 12 characters",
        "https://example.com/path?q=1",
        "risk-assessment and task-management notes",
        "AKIA is the prefix of AWS access keys",
    ],
)
def test_ordinary_prose_is_left_alone(benign: str) -> None:
    assert DEFAULT_REDACTOR.text(benign) == benign


def test_private_spans_are_stripped_and_an_unclosed_tag_hides_the_rest() -> None:
    assert (
        DEFAULT_REDACTOR.text("a <private>x\ny</private> b <PRIVATE>z</Private> c")
        == "a [private] b [private] c"
    )
    assert DEFAULT_REDACTOR.text("keep <private>never closed") == "keep [private]"


def test_custom_patterns_are_validated_and_applied() -> None:
    redactor = Redactor(["ACME-[0-9]{6}"])
    assert redactor.text("ticket ACME-123456 done") == "ticket [redacted:custom] done"
    settings = settings_from_mapping({"privacy": {"redact_patterns": ["ACME-[0-9]{6}"]}})
    assert settings.redact_patterns == ("ACME-[0-9]{6}",)
    for bad in ("(unclosed", "", "x*", 7):
        with pytest.raises(SettingsError) as raised:
            settings_from_mapping({"privacy": {"redact_patterns": [bad]}})
        assert "entry #1" in str(raised.value) and "unclosed" not in str(raised.value)
    with pytest.raises(SettingsError):
        settings_from_mapping({"privacy": {"redact_patterns": "ACME"}})
    with pytest.raises(SettingsError):
        settings_from_mapping({"privacy": ["ACME"]})
    assert compile_custom_patterns(None) == ()


def _write(path: Path, payloads: list[tuple[str, dict[str, object]]]) -> None:
    lines = [
        json.dumps(
            {
                "schema_version": "1.0",
                "run_id": "r",
                "seq": seq,
                "turn_no": 1,
                "type": kind,
                "payload": payload,
                "ts": "2026-07-26T12:00:00+00:00",
            }
        )
        for seq, (kind, payload) in enumerate(payloads, start=1)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_the_events_reader_is_the_choke_point_for_transcript_and_observer_text(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    key = "sk-ant-api03-" + "k" * 30
    _write(
        path,
        [
            ("agent_command_applied", {"text": f"deploy <private>CANARY-1</private> with {key}"}),
            (
                "llm_step_completed",
                {
                    "assistant_message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "ok <private>CANARY-2</private>"}],
                        "tool_calls": [
                            {"name": "sh", "arguments": {"cmd": f"curl -H 'Authorization: Bearer {key}'"}}
                        ],
                    }
                },
            ),
            ("tool_execution_end", {"tool_result": {"result": {"tool_name": "sh", "content": f"KEY={key}"}}}),
        ],
    )
    events = list(iter_events(path))
    rendered = "\n".join(event_search_text(event) for event in events) + json.dumps(
        [e.payload for e in events]
    )
    assert "CANARY" not in rendered and key not in rendered and "k" * 20 not in rendered
    assert "[private]" in rendered and "[redacted:api-key]" in rendered
    entries = transcript_entries(
        read_event_window(path, 1, 3, redactor=Redactor(["deploy"])).events, "2026-07-26 12:00"
    )
    assert len(entries) == 3 and not any(
        "deploy" in entry.content or key in entry.content for entry in entries
    )
    assert key in path.read_text(
        encoding="utf-8"
    )  # the events file itself (the agent's own log) is never rewritten


@pytest.mark.parametrize(
    "text",
    [
        "DB_PASSWORD=hunter2hunter2",
        "STRIPE_API_KEY=rk_live_51Habcdefgh",
        "export GITHUB_TOKEN=abc123def456ghi",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG",
        'config {\\"password\\":\\"s3cr3t-value\\"}',
        '{"password": "s3cr3t-value"}',
        "redis://:s3cr3tpass@cache:6379/0",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0abc\n-----END PGP PRIVATE KEY BLOCK-----",
    ],
)
def test_secrets_under_prefixed_names_and_other_forms_are_masked(text: str) -> None:
    masked = DEFAULT_REDACTOR.text(text)
    assert "[redacted:" in masked
    for secret in ("hunter2hunter2", "rk_live_51H", "abc123def456", "wJalrXUtn", "s3cr3t", "lQOYBF0abc"):
        assert secret not in masked


@pytest.mark.parametrize(
    "code",
    [
        'password = request.form.get("pw")',
        'api_key = os.environ["OPENAI_API_KEY"]',
        "secret_key = settings.SECRET_KEY",
        '<div class="sk-circle-bounce-delay-child">',
        "token = next_token(stream)",
    ],
)
def test_ordinary_code_is_left_alone(code: str) -> None:
    assert DEFAULT_REDACTOR.text(code) == code


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a <private>x <private>y</private> z</private> b", "a [private] b"),
        ("a <private >x</private> b", "a [private] b"),
        ("a <PRIVATE>x", "a [private]"),
        ("a </private> b", "[private] b"),  # a closing tag alone: the text began inside a span
    ],
)
def test_private_spans_nest_and_tags_may_carry_spaces(text: str, expected: str) -> None:
    assert DEFAULT_REDACTOR.text(text) == expected
