"""Migrations are history: the SQL each recorded step runs never changes.

The checksums below are what omray recorded when each step was released. A refactor of
``persistence.database.schema`` (which the PHP steps compile their DDL from) or of a migration's helpers
must leave every step's statements byte for byte as they were; a new change to the schema needs a
new migration.
"""

from __future__ import annotations

from persistence.database.migrations import _SCHEMA_VERSION_DDL, all_migrations
from protocol.canonical import sha256_hex

_RELEASED_TEXT = """
20260722_001_domain 2abfafafac7e482007f090ac53d57fa5848eaa9f9bc027e5dcfd62da56945005
20260725_002_reflection_multi_and_indexes bffe31dcd06396e206a2dd5a62f32b6643b0c056d54e00096bdf8125d1147954
20260726_003_active_generation_and_relevance_text
    03032533ff4dd481826cf0c2daa77496669f63cc5a11827c9395103fe0d37f06
20260729_004_current_activity ef5edc1d2451585be9a6ac2cd8ea5c6efbadc5c989128be4e9e6a746ae68fc21
20260922_005_semantic_health 755db5390273caab79e05ef61f0d98cfcf250adf34a9a113b50e1a68a25fd7d9
omray_001_job_queue 168f5330fb340fe39ba0bcf5db5af9e87d920307a1b6a6b4992b50253589d048
omray_002_exact_search_trigram 2f5d54db92141d749fd9f2138066279446e6689c27c976a9f60d9aad880e2b3a
omray_003_exact_search_order_indexes 50a8665a34030621c14d125f02b87db8de422d34b251b5ebcf29de4d67443e38
omray_004_job_identity_per_database 2bb061eab112f7cac570211b44639a301a1a92281fd69f927b6db2dab27b08e6
omray_005_observe_start 2c76cbccfbe9c30900181628cf08e445ef3a5b72c824e18d1787ca778e53253a
omray_006_read_path ec5f4f5a3bc1bd89148bb77c22cac58cb471660d681c85868a1db8ea9a33069e
omray_007_token_usage d96f5b56970e7a8600f567d12fb1abb13f864a3346e0a941f5d623105acd3655
omray_008_projection_cache b34868708c2fab21cae527b84c3041c6a0ac1cf19ca343c48b8c8c2abc76528f
omray_009_covering_walk_indexes 106043d1a3ca876c5a478f32fdb95a89c55c21ba08a35b3a29991c6b550f64b0
omray_010_transcript addcf0b2b5bab0047e61f0cafead3f4ff33ca426b28ae33df36faab0fb9df2d4
omray_011_transcript_trigram c7b85e54e770a0063ef179afe3324a8dc489eb896f16f38ac4006f4c3d25bb79
omray_012_projection_source_order 6f06c41d2967ba73323545c41ffa6fd181d2f574da8bdfd1bcb0bdd019858b91
omray_013_runtime_events_database e370f22331e3f1b180e22b893f8d7c8dcac0b1a1bd402bde2e31b52a4295618d
omray_014_forget baadae34e016180c8ee3afeae3170074f03b7919feb330574ccf4a3f1846489d
"""
_RELEASED = _RELEASED_TEXT.split()
RELEASED_CHECKSUMS = dict(zip(_RELEASED[::2], _RELEASED[1::2], strict=True))
"""Every released step's checksum (sha256 of its statements joined by a newline)."""


def test_every_released_step_runs_the_sql_it_was_released_with() -> None:
    recorded = {migration.version: migration.checksum for migration in all_migrations()}
    released = {version: recorded.get(version) for version in RELEASED_CHECKSUMS}
    assert released == RELEASED_CHECKSUMS


def test_steps_keep_their_order_and_new_ones_only_append() -> None:
    versions = [migration.version for migration in all_migrations()]
    assert versions[: len(RELEASED_CHECKSUMS)] == list(RELEASED_CHECKSUMS)


def test_the_schema_version_table_is_created_as_released() -> None:
    released = "bd0167f45bd82bf4bd9207322e12a6f734c35f2f77a4fc77bb723682e8545546"
    assert sha256_hex(_SCHEMA_VERSION_DDL) == released
