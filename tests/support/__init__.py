"""Test helpers shared by unit and integration tests (local, in-process, no network)."""
