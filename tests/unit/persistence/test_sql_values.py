"""The read side's bound and decoded values: ``IN`` lists in batches, lenient JSON list columns."""

from __future__ import annotations

import pytest

from persistence.database.sql_values import ID_BATCH, in_batches, json_list


@pytest.mark.parametrize("count", [0, 1, 499, 500, 501, 1001])
def test_in_batches_keeps_every_value_once_in_order_with_one_mark_each(count: int) -> None:
    values = list(range(count))
    batches = list(in_batches(values))
    assert [value for batch, _ in batches for value in batch] == values
    for batch, marks in batches:
        assert 1 <= len(batch) <= ID_BATCH and marks.split(", ") == ["?"] * len(batch)
    assert len(batches) == -(-count // ID_BATCH)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [('["a", 1]', ["a", 1]), ("[]", []), ("not json", []), ('{"a": 1}', []), ('"text"', []), (None, [])],
)
def test_json_list_reads_arrays_and_anything_else_as_empty(raw: object, expected: list[object]) -> None:
    assert json_list(raw) == expected
