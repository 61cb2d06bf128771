"""Jobs read the settings when they run and freeze only versions (reference §7.2, §9.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.observer.actor import observe_boundary
from actors.reflector.actor import reflect_generation
from actors.reflector.core import ReflectPayloadError
from cluster.commands.demo_session import demo_session, event_line
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import ModelSettingsError
from protocol.jobs import JOB_PAYLOAD_ADAPTER, JobEnvelope, ObserveBoundaryJob, ReflectGenerationJob

# The per-boundary policy (the original): these tests observe at every job, whatever its size.
PER_BOUNDARY: dict[str, Any] = {"observer": {"observe_after_tokens": 0}}

SESSION = "s-settings"


from actors.store.reader import DataReader  # noqa: E402


class PingingStore(Store):
    def ping(self) -> bool:
        return True


class FakeContext:
    """The worker context without Ray: a local Store and a list of dispatched jobs."""

    def __init__(self) -> None:
        self.stores: dict[str, PingingStore] = {}
        self.dispatched: list[JobEnvelope] = []

    def store_for(self, db_path: str) -> PingingStore:
        return self.stores.setdefault(db_path, PingingStore(db_path))

    def reader_for(self, db_path: str) -> DataReader:
        return DataReader(db_path, self.store_for(db_path))

    def dispatch(self, envelope: JobEnvelope) -> str:
        self.dispatched.append(envelope)
        return envelope.job_id


def _write_settings(path: Path, block: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"observational_memory": block}), encoding="utf-8")
    return path


def _observe_envelope(tmp_path: Path, settings_file: Path) -> JobEnvelope:
    events = [e for turn in demo_session(SESSION)[:3] for e in turn]
    (tmp_path / "events.jsonl").write_text("".join(event_line(e) for e in events), encoding="utf-8")
    job = ObserveBoundaryJob(
        session_id=SESSION,
        terminal_end_seq=int(events[-1]["seq"]),
        terminal_status="completed",
        renderer_version="1",
        observer_schema_version="1",
        db_path=str(tmp_path / "om.sqlite"),
        events_path=str(tmp_path / "events.jsonl"),
        settings_file=str(settings_file),
    )
    return JobEnvelope(job_id="observe-1", correlation_id=SESSION, payload=job)


def test_observe_job_reads_the_settings_file_when_it_runs(tmp_path: Path) -> None:
    settings_file = _write_settings(tmp_path / "omray.yaml", {"model": "builtin/extractive", **PER_BOUNDARY})
    envelope = _observe_envelope(tmp_path, settings_file)
    assert "model" not in envelope.model_dump_json()  # only where the settings are, not what they say
    # The user breaks the model after the job was queued: the attempt fails on the current settings.
    _write_settings(
        settings_file,
        {"model": "no-provider", **PER_BOUNDARY, "reflector": {"reflect_after_observation_tokens": 50}},
    )
    context = FakeContext()
    with pytest.raises(ModelSettingsError):
        observe_boundary(envelope, 1, context)
    assert MemoryReader(tmp_path / "om.sqlite").all_observations(SESSION) == []
    # The retry picks up the model the user fixes, and the reflect job it dispatches names the file.
    _write_settings(
        settings_file,
        {
            "model": "builtin/extractive",
            **PER_BOUNDARY,
            "reflector": {"reflect_after_observation_tokens": 50},
        },
    )
    detail = observe_boundary(envelope, 2, context)
    assert detail["status"] == "inserted"
    [reflect] = [e for e in context.dispatched if e.payload.kind == "reflect_generation"]
    assert isinstance(reflect.payload, ReflectGenerationJob)
    assert reflect.payload.settings_file == str(settings_file) and reflect.payload.settings == {}


def test_reflect_job_fails_as_specified_when_the_model_no_longer_matches(tmp_path: Path) -> None:
    block = {
        "model": "builtin/extractive",
        **PER_BOUNDARY,
        "reflector": {"reflect_after_observation_tokens": 50},
    }
    settings_file = _write_settings(tmp_path / "omray.yaml", block)
    context = FakeContext()
    observe_boundary(_observe_envelope(tmp_path, settings_file), 1, context)
    [reflect] = [e for e in context.dispatched if e.payload.kind == "reflect_generation"]
    other = {
        **block,
        "model": "local/other-model",
        "providers": {"local": {"base_url": "http://127.0.0.1:9/v1", "context_window": 8192}},
    }
    _write_settings(settings_file, other)
    with pytest.raises(ReflectPayloadError, match="mismatch"):
        reflect_generation(reflect, 1, context)
    assert MemoryReader(tmp_path / "om.sqlite").active_generation(SESSION) is None
    _write_settings(settings_file, block)
    assert reflect_generation(reflect, 2, context)["status"] != "failed"


def test_payloads_with_a_settings_block_still_load_and_run_with_it(tmp_path: Path) -> None:
    old = {
        "kind": "observe_boundary",
        "run_id": SESSION,
        "terminal_end_seq": 3,
        "terminal_status": "completed",
        "renderer_version": "1",
        "observer_schema_version": "1",
        "db_path": str(tmp_path / "om.sqlite"),
        "events_path": str(tmp_path / "events.jsonl"),
        "settings": {"model": "builtin/extractive", **PER_BOUNDARY},
    }
    job = JOB_PAYLOAD_ADAPTER.validate_python(old)
    assert isinstance(job, ObserveBoundaryJob) and job.settings_file is None
    assert JOB_PAYLOAD_ADAPTER.validate_json(job.model_dump_json()) == job
    events = [e for turn in demo_session(SESSION)[:1] for e in turn]
    (tmp_path / "events.jsonl").write_text("".join(event_line(e) for e in events), encoding="utf-8")
    job = job.model_copy(update={"terminal_end_seq": int(events[-1]["seq"])})
    detail = observe_boundary(JobEnvelope(job_id="old", payload=job), 1, FakeContext())
    assert detail["status"] == "inserted"
