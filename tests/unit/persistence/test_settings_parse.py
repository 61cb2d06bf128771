"""Settings (§3.1, §3.2, §14.1) and omray's additions: defaults, coercions, exact messages, overrides."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import pytest

from persistence.settings.file import load_settings
from persistence.settings.parse import apply_overrides, extract_om_block, settings_from_mapping
from protocol.errors import ModelSettingsError, SettingsError
from protocol.settings import (
    BUILTIN_EMBEDDING_MODEL,
    BUILTIN_MODEL,
    DEFAULT_DATABASE,
    EmbeddingApiSettings,
    OmSettings,
)

EMBEDDING = {"base_url": "http://localhost:8059/v1/", "model_id": "coderankembed-q8_0.gguf"}
RERANKER = {"base_url": "http://localhost:8060/v1", "model_id": "bge-reranker-base-q8_0.gguf"}


def semantic(embedding: dict[str, Any] | None = None, reranker: Any = "absent") -> dict[str, Any]:
    block: dict[str, Any] = {"embedding_api": {**EMBEDDING, **(embedding or {})}}
    if reranker != "absent":
        block["reranker_api"] = reranker
    return {"semantic": block}


def test_defaults() -> None:
    s = settings_from_mapping(None)
    assert s == settings_from_mapping({})
    assert s.database == DEFAULT_DATABASE
    assert s.model == BUILTIN_MODEL  # runs with no network and no API key
    assert s.context_window_ratio == 0.65
    assert (s.renderer_version, s.observer_schema_version, s.reflector_schema_version) == ("1", "1", "1")
    assert s.reflect_after_observation_tokens == 40000
    assert s.observations_max_tokens == 30000
    assert s.semantic is not None and s.semantic.embedding_api.is_builtin and s.semantic.reranker_api is None
    assert s.token_encoding == "o200k_base"
    assert [p.name for p in s.providers] == ["builtin"]


@pytest.mark.parametrize("off", [None, False, {}, []])
def test_semantic_can_be_turned_off(off: Any) -> None:
    assert settings_from_mapping({"semantic": off}).semantic is None


@pytest.mark.parametrize("model", [None, "", "   "])
def test_no_model_means_the_offline_model(model: str | None) -> None:
    assert settings_from_mapping({"model": model}).require_model() == BUILTIN_MODEL


def test_readme_example_and_immutability() -> None:
    s = settings_from_mapping(
        {
            "storage": {"database": "data/om.sqlite"},
            "model": "  llama_cpp_test/test ",
            "observer": {"context_window_ratio": "0.5", "renderer_version": "2", "schema_version": 3},
            "reflector": {"reflect_after_observation_tokens": "300.9", "schema_version": "r2"},
            "pools": {"observations_max_tokens": 1},
        }
    )
    assert s.database == "data/om.sqlite"
    assert s.model == "llama_cpp_test/test"
    assert s.context_window_ratio == 0.5
    assert (s.renderer_version, s.observer_schema_version, s.reflector_schema_version) == ("2", "3", "r2")
    assert s.reflect_after_observation_tokens == 300
    assert s.observations_max_tokens == 1
    with pytest.raises(ValueError):
        s.model = "x/y"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "field", "expected"),
    [
        ({"storage": {"database": "  "}}, "database", DEFAULT_DATABASE),
        ({"storage": {"database": 5}}, "database", DEFAULT_DATABASE),
        ({"storage": "x.sqlite"}, "database", DEFAULT_DATABASE),
        ({"model": ""}, "model", BUILTIN_MODEL),
        ({"model": "   "}, "model", BUILTIN_MODEL),
        ({"model": 42}, "model", BUILTIN_MODEL),
        ({"observer": {"context_window_ratio": "abc"}}, "context_window_ratio", 0.65),
        ({"observer": {"context_window_ratio": True}}, "context_window_ratio", 0.65),
        ({"observer": {"context_window_ratio": None}}, "context_window_ratio", 0.65),
        ({"observer": {"context_window_ratio": " .25 "}}, "context_window_ratio", 0.25),
        ({"observer": {"context_window_ratio": "5e-1"}}, "context_window_ratio", 0.5),
        ({"observer": {"renderer_version": ""}}, "renderer_version", "1"),
        ({"observer": {"renderer_version": None}}, "renderer_version", "1"),
        ({"reflector": {"reflect_after_observation_tokens": 12.7}}, "reflect_after_observation_tokens", 12),
        ({"pools": {"observations_max_tokens": "250"}}, "observations_max_tokens", 250),
        ({"semantic": None}, "semantic", None),
        ({"semantic": {}}, "semantic", None),
        ({"semantic": []}, "semantic", None),
        ({"tokens": {"encoding": "cl100k_base"}}, "token_encoding", "cl100k_base"),
    ],
)
def test_defaults_and_coercions(data: dict[str, Any], field: str, expected: Any) -> None:
    assert getattr(settings_from_mapping(data), field) == expected


def test_ignored_keys_have_no_effect() -> None:
    ignored = {
        "observer": {"model": "a/b", "thinking_level": "high"},
        "reflector": {"model": "c/d", "thinking_level": "low", "context_window_ratio": 0.1},
        "pools": {"reflections_max_tokens": 5},
    }
    assert settings_from_mapping(ignored) == settings_from_mapping({})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"modle": "a/b"},
            "observational_memory.modle is not a setting; did you mean observational_memory.model?",
        ),
        (
            {"observer": {"observe_afer_tokens": 0}},
            "observational_memory.observer.observe_afer_tokens is not a setting; did you mean "
            "observational_memory.observer.observe_after_tokens?",
        ),
        (
            {"privacy": {"redact_pattern": ["x"]}},
            "observational_memory.privacy.redact_pattern is not a setting; did you mean "
            "observational_memory.privacy.redact_patterns?",
        ),
        (
            {"semantic": {"embedding_api": {"model": "m"}}},
            "observational_memory.semantic.embedding_api.model is not a setting; did you mean "
            "observational_memory.semantic.embedding_api.model_id?",
        ),
        (
            {"providers": {"local": {"base_url": "http://h/v1", "context_window": 8, "timeout": 5}}},
            "observational_memory.providers.local.timeout is not a setting; did you mean "
            "observational_memory.providers.local.timeout_s?",
        ),
        (
            {"prices": {"models": {"p/m": {"prompt": 1, "completion": 1, "cached": 1}}}},
            "observational_memory.prices.models.p/m.cached is not a setting; did you mean "
            "observational_memory.prices.models.p/m.cached_prompt?",
        ),
        (
            {"something_new": {"x": 1}},
            "observational_memory.something_new is not a setting; the keys here are",
        ),
        ({7: 1}, "observational_memory.7 is not a setting; the keys here are"),
    ],
)
def test_an_unknown_key_at_any_level_is_an_error_naming_it_and_the_nearest_key(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping(data)
    assert str(info.value).startswith(message) and str(info.value).endswith("Nothing was changed.")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"observational_memroy": {"model": "a/b"}},
            "observational_memroy is not a setting; did you mean observational_memory?",
        ),
        (
            {"extensions": {"settings": {"observational_memroy": {"model": "a/b"}}}},
            "extensions.settings.observational_memroy is not a setting; did you mean "
            "extensions.settings.observational_memory?",
        ),
        ({"observational_memory": {}, "modle": "a/b"}, "modle is not a setting; the keys here are"),
        (
            {"extensions": {"enabled": ["X"]}, "observational_memroy": {"model": "a/b"}},
            "observational_memroy is not a setting; did you mean observational_memory?",
        ),
        (
            {
                "observational_memory": {"model": "a/b"},
                "extensions": {"settings": {"observational_memory": {}}},
            },
            "the settings document has two observational_memory blocks",
        ),
    ],
)
def test_a_misspelt_block_or_a_key_beside_it_is_an_error(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        extract_om_block(doc)
    assert str(info.value).startswith(message)


def test_a_misspelt_key_in_a_settings_file_is_refused_whole(tmp_path: Path) -> None:
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  modle: local/qwen\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"did you mean observational_memory\.model\?"):
        load_settings(cwd=tmp_path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"observer": {"context_window_ratio": 1.0}}, "context_window_ratio must satisfy 0 < ratio < 1."),
        ({"observer": {"context_window_ratio": 0}}, "context_window_ratio must satisfy 0 < ratio < 1."),
        ({"observer": {"context_window_ratio": "-0.5"}}, "context_window_ratio must satisfy 0 < ratio < 1."),
        (
            {"observer": {"context_window_ratio": math.nan}},
            "context_window_ratio must satisfy 0 < ratio < 1.",
        ),
        ({"semantic": "on"}, "observational_memory.semantic requires embedding_api."),
        ({"semantic": {"reranker_api": RERANKER}}, "observational_memory.semantic requires embedding_api."),
        (
            {"semantic": {"embedding_api": "http://x"}},
            "observational_memory.semantic requires embedding_api.",
        ),
        (semantic(reranker="http://x"), "semantic.reranker_api must be a mapping."),
        (
            semantic(reranker={**RERANKER, "min_score": "-4"}),
            "semantic.reranker_api.min_score must be a finite number.",
        ),
        (
            semantic(reranker={**RERANKER, "min_score": None}),
            "semantic.reranker_api.min_score must be a finite number.",
        ),
        (
            semantic(reranker={**RERANKER, "min_score": math.inf}),
            "semantic.reranker_api.min_score must be a finite number.",
        ),
        (
            semantic(reranker={**RERANKER, "min_score": True}),
            "semantic.reranker_api.min_score must be a finite number.",
        ),
        (semantic({"batch_size": 0}), "semantic batch_size must be a positive integer."),
        (semantic({"chunk_bytes": "1200"}), "semantic chunk_bytes must be a positive integer."),
        (semantic({"max_lines": 1.5}), "semantic max_lines must be a positive integer."),
        (
            semantic(reranker={**RERANKER, "document_characters": 0}),
            "semantic document_characters must be a positive integer.",
        ),
        (
            semantic(reranker={**RERANKER, "batch_size": -1}),
            "semantic batch_size must be a positive integer.",
        ),
        (semantic({"chunk_bytes": 3, "overlap_bytes": 0}), "chunk_bytes must be at least 4; "),
        (semantic({"chunk_bytes": 10, "overlap_bytes": 10}), "chunk_bytes must be at least 4; "),
        (semantic({"overlap_bytes": -1}), "chunk_bytes must be at least 4; "),
        (semantic({"overlap_bytes": "3"}), "chunk_bytes must be at least 4; "),
        (semantic({"base_url": "file:///tmp/x"}), "semantic base_url must be an HTTP(S) "),
        (semantic({"base_url": "http://user:pw@host/v1"}), "semantic base_url must be an HTTP(S) "),
        (semantic({"base_url": "http://host/v1?x=1"}), "semantic base_url must be an HTTP(S) "),
        (semantic({"base_url": "http://host/v1#frag"}), "semantic base_url must be an HTTP(S) "),
        (semantic({"base_url": "http:///v1"}), "semantic base_url must be an HTTP(S) "),
        (semantic({"base_url": "  "}), "semantic base_url must be an HTTP(S) "),
        (semantic(reranker={"model_id": "m"}), "semantic base_url must be an HTTP(S) "),
        (semantic({"model_id": " "}), "semantic API requires a non-empty model_id."),
        (semantic(reranker={"base_url": "https://r"}), "semantic API requires a non-empty model_id."),
    ],
)
def test_validation_messages(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping(data)
    assert str(info.value).startswith(message)
    assert not isinstance(info.value, ModelSettingsError)


def test_semantic_parsing_and_defaults() -> None:
    s = settings_from_mapping(
        semantic({"query_prefix": "  Represent this query: "}, {**RERANKER, "min_score": -4})
    )
    assert s.semantic is not None
    api = s.semantic.embedding_api
    assert api.base_url == "http://localhost:8059/v1"
    assert api.query_prefix == "Represent this query:"
    assert (api.chunk_bytes, api.overlap_bytes, api.max_lines, api.batch_size) == (1200, 192, 80, 4)
    reranker = s.semantic.reranker_api
    assert reranker is not None
    assert (reranker.batch_size, reranker.document_characters, reranker.min_score) == (8, 768, -4.0)
    no_floor = settings_from_mapping(semantic(reranker=dict(RERANKER))).semantic
    assert (
        no_floor is not None and no_floor.reranker_api is not None and no_floor.reranker_api.min_score is None
    )
    plain = settings_from_mapping(semantic(reranker=None)).semantic
    assert plain is not None and plain.reranker_api is None


def test_signature_is_stable_and_covers_only_embedding_layout() -> None:
    base = settings_from_mapping(semantic()).semantic
    assert base is not None
    signature = base.signature()
    php_json = r'["http:\/\/localhost:8059\/v1","coderankembed-q8_0.gguf",1200,192,80,1]'
    assert signature == hashlib.sha256(php_json.encode()).hexdigest()
    same = settings_from_mapping(
        semantic({"query_prefix": "q", "batch_size": 9}, {**RERANKER, "min_score": 1})
    ).semantic
    assert same is not None and same.signature() == signature
    for change in ({"chunk_bytes": 1000}, {"overlap_bytes": 100}, {"max_lines": 40}, {"model_id": "other"}):
        changed = settings_from_mapping(semantic(change)).semantic
        assert changed is not None and changed.signature() != signature


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("@fast", "observational_memory.model must be an exact provider/model reference (provider/model)."),
        (
            "@openai/gpt",
            "observational_memory.model must be an exact provider/model reference (provider/model).",
        ),
        ("gpt-4o", "observational_memory.model must be an exact provider/model reference (provider/model)."),
    ],
)
def test_require_model(model: str | None, message: str) -> None:
    s = settings_from_mapping({"model": model})  # never raises at parse time
    with pytest.raises(ModelSettingsError) as info:
        s.require_model()
    assert str(info.value) == message


def test_envelope_and_versions_and_paths() -> None:
    s = settings_from_mapping({"model": "p/m"})
    assert s.require_model() == "p/m"
    assert s.envelope(128000) == 83200
    assert settings_from_mapping({"observer": {"context_window_ratio": 0.5}}).envelope(10000) == 5000
    for bad in (0, -1):
        with pytest.raises(SettingsError, match=r"^context_window must be positive\.$"):
            s.envelope(bad)
    copy = s.with_versions("7", "8")
    assert (copy.renderer_version, copy.observer_schema_version, copy.reflector_schema_version) == (
        "7",
        "8",
        "1",
    )
    assert (s.renderer_version, s.observer_schema_version) == ("1", "1")
    with pytest.raises(SettingsError):
        s.with_versions("", "8")
    assert s.database_path("/home/u/proj/") == "/home/u/proj/" + DEFAULT_DATABASE
    relative = settings_from_mapping({"storage": {"database": "/data/om.sqlite"}})
    assert relative.database_path("/cwd") == "/data/om.sqlite"
    assert (
        settings_from_mapping({"storage": {"database": "db.sqlite"}}).semantic_dir("/w")
        == "/w/db.sqlite.semantic"
    )


def test_providers() -> None:
    s = settings_from_mapping(
        {
            "model": "local/qwen/qwen3-8b",
            "providers": {
                "local": {"base_url": "http://127.0.0.1:8080/v1/", "context_window": 8192},
                "openai": {
                    "base_url": "https://api.openai.com/v1",
                    "api_key_env": "OPENAI_API_KEY",
                    "context_window": 128000,
                    "timeout_s": 30,
                },
            },
        }
    )
    local = s.model_provider()
    assert (local.name, local.kind, local.base_url, local.context_window, local.timeout_s) == (
        "local",
        "openai_compatible",
        "http://127.0.0.1:8080/v1",
        8192,
        300.0,
    )
    assert s.provider_for("openai/gpt-4o").api_key_env == "OPENAI_API_KEY"
    builtin = s.provider_for(BUILTIN_MODEL)
    assert (builtin.kind, builtin.context_window, builtin.base_url) == ("builtin", 32768, None)
    with pytest.raises(SettingsError, match=r"provider 'missing' is not defined"):
        s.provider_for("missing/model")
    with pytest.raises(ModelSettingsError):
        s.provider_for("no-slash")


@pytest.mark.parametrize(
    ("providers", "message"),
    [
        ("x", "observational_memory.providers must be a mapping"),
        ({"builtin": {"base_url": "http://x", "context_window": 1}}, "provider name 'builtin' is reserved"),
        ({"a/b": {"base_url": "http://x", "context_window": 1}}, "provider name 'a/b' must be"),
        ({"p": "http://x"}, "providers.p must be a mapping."),
        ({"p": {"base_url": "ftp://x", "context_window": 1}}, "providers.p.base_url must be an HTTP(S) URL"),
        ({"p": {"context_window": 1}}, "providers.p.base_url must be an HTTP(S) URL"),
        (
            {"p": {"base_url": "http://x"}},
            "providers.p.context_window is required: the model's context window in tokens (e.g. 32768)",
        ),
        (
            {"p": {"base_url": "http://x", "context_window": 0}},
            "providers.p.context_window must be an integer >= 1.",
        ),
        (
            {"p": {"base_url": "http://x", "context_window": "8k"}},
            "providers.p.context_window must be an integer >= 1.",
        ),
        (
            {"p": {"base_url": "http://x", "context_window": 1, "timeout_s": 0}},
            "providers.p.timeout_s must be a number > 0.",
        ),
        (
            {"p": {"base_url": "http://x", "context_window": 1, "timeout_s": "5"}},
            "providers.p.timeout_s must be a number > 0.",
        ),
        (
            {"p": {"base_url": "http://x", "context_window": 1, "api_key": "k"}},
            "observational_memory.providers.p.api_key is not a setting; did you mean "
            "observational_memory.providers.p.api_key_env?",
        ),
    ],
)
def test_provider_validation(providers: Any, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping({"providers": providers})
    assert str(info.value).startswith(message)


def test_api_key_env_error_never_echoes_the_value() -> None:
    pasted_key = "sk-live-abc123-should-not-appear"
    with pytest.raises(SettingsError) as info:
        settings_from_mapping(
            {"providers": {"p": {"base_url": "http://x", "context_window": 1, "api_key_env": pasted_key}}}
        )
    assert pasted_key not in str(info.value)
    assert "api_key_env" in str(info.value)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (
            {"encoding": "p50k_base"},
            "tokens.encoding must be one of ['o200k_base', 'cl100k_base'], got 'p50k_base'.",
        ),
        ("o200k_base", "observational_memory.tokens must be a mapping."),
    ],
)
def test_token_encoding_validation(tokens: Any, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping({"tokens": tokens})
    assert str(info.value) == message


def test_non_mapping_block_is_rejected() -> None:
    with pytest.raises(SettingsError, match="must be a mapping"):
        settings_from_mapping(["model"])  # type: ignore[arg-type]


def test_a_hatfield_file_keeps_its_own_keys_and_only_the_block_is_strict(tmp_path: Path) -> None:
    # .hatfield/settings.yaml is Hatfield's file: keys beside omray's block (and, with no block, every
    # key) are Hatfield's, never read as omray settings; inside the block a misspelling is an error.
    hatfield = tmp_path / ".hatfield"
    hatfield.mkdir()
    settings = hatfield / "settings.yaml"
    settings.write_text("model: hatfield/own-model\ntheme: dark\n", encoding="utf-8")
    assert load_settings(cwd=tmp_path) == settings_from_mapping({})
    settings.write_text(
        "theme: dark\nobservational_memory:\n  storage:\n    database: x.sqlite\n", encoding="utf-8"
    )
    assert load_settings(cwd=tmp_path).database == "x.sqlite"
    settings.write_text("theme: dark\nobservational_memory:\n  modle: a/b\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"did you mean observational_memory\.model\?"):
        load_settings(cwd=tmp_path)
    # omray's own file holds nothing but the block: the same key there is a mistake.
    (tmp_path / "omray.yaml").write_text("theme: dark\nobservational_memory: {}\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"^theme is not a setting"):
        load_settings(cwd=tmp_path)


def test_a_top_level_block_beside_hatfield_extensions_is_read() -> None:
    # It was silently dropped (defaults ran) when the document also had an extensions mapping.
    doc = {"extensions": {"enabled": ["X"]}, "observational_memory": {"model": "p/m"}}
    assert extract_om_block(doc) == {"model": "p/m"}


def test_extract_om_block() -> None:
    block = {"model": "p/m"}
    hatfield = {"extensions": {"enabled": ["X"], "settings": {"observational_memory": block, "other": {}}}}
    assert extract_om_block(hatfield) == block
    assert extract_om_block({"observational_memory": block}) == block
    assert extract_om_block(block) == block
    assert extract_om_block({"extensions": {"enabled": ["X"]}}) == {}
    assert extract_om_block({"observational_memory": None}) == {}
    with pytest.raises(SettingsError):
        extract_om_block({"observational_memory": "p/m"})


def test_apply_overrides() -> None:
    data = {"reflector": {"schema_version": "1"}, "semantic": None}
    result = apply_overrides(
        data,
        [
            "reflector.reflect_after_observation_tokens=300",
            "model=builtin/extractive",
            "observer.context_window_ratio=0.5",
            'observer.renderer_version="2"',
            "semantic.embedding_api.base_url=http://x/v1",
            "tokens.encoding=NaN",
            "flag=true",
            "empty=",
        ],
    )
    assert result == {
        "reflector": {"schema_version": "1", "reflect_after_observation_tokens": 300},
        "semantic": {"embedding_api": {"base_url": "http://x/v1"}},
        "model": "builtin/extractive",
        "observer": {"context_window_ratio": 0.5, "renderer_version": "2"},
        "tokens": {"encoding": "NaN"},
        "flag": True,
        "empty": "",
    }
    assert data == {"reflector": {"schema_version": "1"}, "semantic": None}  # input untouched
    s = settings_from_mapping(
        apply_overrides(None, ["model=builtin/extractive", "pools.observations_max_tokens=70"])
    )
    assert (s.model, s.observations_max_tokens) == ("builtin/extractive", 70)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("no-equals-sk-secret", "override #1 is malformed: expected KEY=VALUE."),
        ("=5", "override #1 key '' is malformed"),
        ("a..b=5", "override #1 key 'a..b' is malformed"),
        ("a.=5", "override #1 key 'a.' is malformed"),
        ("model.name=5", "override #1 cannot set 'model.name': 'model' is not a mapping."),
    ],
)
def test_malformed_overrides(override: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        apply_overrides({"model": "p/m"}, [override])
    assert str(info.value).startswith(message)
    assert "sk-secret" not in str(info.value)


def test_direct_construction_still_validates_ranges() -> None:
    with pytest.raises(ValueError):
        OmSettings(context_window_ratio=1.0)


def test_signature_escapes_non_ascii_like_php() -> None:
    s = settings_from_mapping(semantic({"model_id": "modèle"})).semantic
    assert s is not None
    php_json = r'["http:\/\/localhost:8059\/v1","mod\u00e8le",1200,192,80,1]'
    assert s.signature() == hashlib.sha256(php_json.encode()).hexdigest()


def test_builtin_embedder_needs_no_base_url() -> None:
    s = settings_from_mapping({"semantic": {"embedding_api": {"model_id": f" {BUILTIN_EMBEDDING_MODEL} "}}})
    assert s.semantic is not None
    api = s.semantic.embedding_api
    assert (api.base_url, api.model_id, api.is_builtin) == (None, BUILTIN_EMBEDDING_MODEL, True)
    assert (api.chunk_bytes, api.overlap_bytes, api.max_lines, api.batch_size) == (1200, 192, 80, 32)
    null_url = settings_from_mapping(semantic({"base_url": None, "model_id": BUILTIN_EMBEDDING_MODEL}))
    assert null_url.semantic is not None and null_url.semantic.embedding_api.base_url is None
    assert null_url.semantic.signature() == s.semantic.signature()
    php_json = r'[null,"builtin\/all-minilm-l6-v2",1200,192,80,1]'
    assert s.semantic.signature() == hashlib.sha256(php_json.encode()).hexdigest()
    with_url = settings_from_mapping(semantic({"model_id": BUILTIN_EMBEDDING_MODEL})).semantic
    assert with_url is not None and with_url.embedding_api.base_url == "http://localhost:8059/v1"
    assert with_url.signature() != s.semantic.signature()


@pytest.mark.parametrize(
    ("embedding", "message"),
    [
        ({"model_id": "all-minilm-l6-v2"}, "semantic base_url must be an HTTP(S) "),
        ({"model_id": "Builtin/All-MiniLM-L6-v2"}, "semantic base_url must be an HTTP(S) "),
        (
            {"model_id": BUILTIN_EMBEDDING_MODEL, "base_url": "ftp://x"},
            "semantic base_url must be an HTTP(S) ",
        ),
        ({"model_id": BUILTIN_EMBEDDING_MODEL, "base_url": ""}, "semantic base_url must be an HTTP(S) "),
        (
            {"model_id": BUILTIN_EMBEDDING_MODEL, "chunk_bytes": 0},
            "semantic chunk_bytes must be a positive integer.",
        ),
        ({}, "semantic base_url must be an HTTP(S) "),
    ],
)
def test_only_the_builtin_embedder_may_omit_base_url(embedding: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping({"semantic": {"embedding_api": embedding}})
    assert str(info.value).startswith(message)


def test_direct_construction_requires_base_url_unless_builtin() -> None:
    assert EmbeddingApiSettings(base_url=None, model_id=BUILTIN_EMBEDDING_MODEL).is_builtin
    with pytest.raises(ValueError, match="semantic base_url must be"):
        EmbeddingApiSettings(base_url=None, model_id="nomic-embed")


def test_offline_embedder_batches_default_to_32_and_endpoints_keep_4() -> None:
    offline = settings_from_mapping({"semantic": {"embedding_api": {"model_id": "builtin/all-minilm-l6-v2"}}})
    assert offline.semantic is not None and offline.semantic.embedding_api.batch_size == 32
    endpoint = settings_from_mapping(
        {"semantic": {"embedding_api": {"base_url": "http://127.0.0.1:8059/v1", "model_id": "m"}}}
    )
    assert endpoint.semantic is not None and endpoint.semantic.embedding_api.batch_size == 4
    chosen = settings_from_mapping(
        {"semantic": {"embedding_api": {"model_id": "builtin/all-minilm-l6-v2", "batch_size": 8}}}
    )
    assert chosen.semantic is not None and chosen.semantic.embedding_api.batch_size == 8


def test_the_no_match_floor_is_on_by_default_and_a_setting_turns_it_off() -> None:
    default = settings_from_mapping({})
    assert default.semantic is not None and default.semantic.no_match is True
    block = {"embedding_api": {"model_id": "builtin/all-minilm-l6-v2"}, "no_match": False}
    off = settings_from_mapping({"semantic": block})
    assert off.semantic is not None and off.semantic.no_match is False
    with pytest.raises(SettingsError, match=r"semantic\.no_match must be true or false"):
        settings_from_mapping({"semantic": {**block, "no_match": "no"}})


@pytest.mark.parametrize("value", [0, -5, math.inf, -math.inf, math.nan, "lots", True, 0.5, 10**10])
@pytest.mark.parametrize(
    ("section", "key"),
    [("reflector", "reflect_after_observation_tokens"), ("pools", "observations_max_tokens")],
)
def test_a_token_threshold_out_of_range_is_an_error_naming_its_key(
    value: Any, section: str, key: str
) -> None:
    with pytest.raises(SettingsError, match=rf"^{section}\.{key} must be a whole number from 1 to "):
        settings_from_mapping({section: {key: value}})


def test_storage_node_and_node_resource_choose_the_data_node() -> None:
    from persistence.settings.parse import settings_from_mapping

    assert settings_from_mapping({"storage": {"node": "gpu-box"}}).data_node == "gpu-box"
    assert (
        settings_from_mapping({"storage": {"node_resource": "omray_data"}}).data_node_resource == "omray_data"
    )
    plain = settings_from_mapping({})
    assert plain.data_node is None and plain.data_node_resource is None


@pytest.mark.parametrize(
    "storage",
    [{"node": "a", "node_resource": "b"}, {"node": "has space"}, {"node": 5}, {"node_resource": ""}],
    ids=["both", "bad-name", "not-text", "empty"],
)
def test_a_bad_storage_node_is_a_settings_error_naming_the_key(storage: dict[str, object]) -> None:
    from persistence.settings.parse import settings_from_mapping
    from protocol.errors import SettingsError

    with pytest.raises(SettingsError, match=r"storage\.node"):
        settings_from_mapping({"storage": storage})
