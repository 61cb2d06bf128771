"""reflect_generation with the offline ``builtin/extractive`` model on a real SQLite database."""

from __future__ import annotations

from pathlib import Path

from actors.models.builtin import BuiltinExtractiveModel
from actors.reflector.pipeline import ReflectResult, reflect_generation
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.records import Relevance

from .helpers import BUILTIN, RUN, HookedModel, commit_observation, ports, settings, threshold_job

SESSION: list[tuple[int, str, Relevance]] = [
    (1, "User asked to fix persistence/writers/store.py claim logic", "high"),
    (2, "Tool edited persistence/writers/store.py to reclaim failed rows", "low"),
    (3, "Tests in tests/unit/persistence/test_generations.py pass now", "medium"),
    (4, "User prefers small focused commits", "critical"),
    (5, "Assistant ran pytest on tests/unit/persistence/test_generations.py", "low"),
    (6, "Queue retries jobs up to three times", "medium"),
]


def reflect_session(db_path: Path) -> tuple[ReflectResult, MemoryReader, HookedModel, list[str]]:
    with Store(db_path) as store:
        ids = [
            commit_observation(store, seq, text, relevance=rel).observation_id for seq, text, rel in SESSION
        ]
        reader = MemoryReader(db_path)
        om_settings = settings(model=BUILTIN, threshold=20, max_tokens=30)
        job = threshold_job(reader, om_settings)
        model = HookedModel(BuiltinExtractiveModel())
        resolved: list[str] = []
        result = reflect_generation(
            job, job.generation_id, om_settings, ports(reader, store, model, resolved=resolved)
        )
        assert resolved == [BUILTIN]
        return result, reader, model, ids


def test_builtin_model_reflects_drops_and_promotes(tmp_path: Path) -> None:
    result, reader, model, ids = reflect_session(tmp_path / "om.sqlite")

    assert result.status == "promoted"
    reflections = reader.active_reflections(RUN)
    assert result.new_reflections == len(reflections) == 2
    # Reflections group the observations that share a file path.
    supports = {r.supporting_observation_ids for r in reflections}
    assert supports == {tuple(sorted([ids[0], ids[1]])), tuple(sorted([ids[2], ids[4]]))}
    # The pool (36 tokens) is over its 30-token target, so the Dropper ran; the cap is 1. Each stage's
    # first answer was accepted in full, so no receipt round followed it.
    assert model.tools_seen == [["record_reflections"], ["drop_observations"]]
    assert result.dropped == 1 and result.retained == 5
    remaining = set(reader.active_candidate_set(RUN).observation_ids)
    (dropped,) = set(ids) - remaining
    cited = {i for r in reflections for i in r.supporting_observation_ids}
    assert dropped in cited  # only observations a reflection already preserves are proposed
    assert reader.activity(RUN) is None


def test_builtin_model_is_deterministic(tmp_path: Path) -> None:
    first, first_reader, _, _ = reflect_session(tmp_path / "a" / "om.sqlite")
    second, second_reader, _, _ = reflect_session(tmp_path / "b" / "om.sqlite")

    assert first.as_dict() == second.as_dict()
    assert [r.reflection_id for r in first_reader.active_reflections(RUN)] == [
        r.reflection_id for r in second_reader.active_reflections(RUN)
    ]
    assert first_reader.active_candidate_set(RUN).observation_ids == (
        second_reader.active_candidate_set(RUN).observation_ids
    )
