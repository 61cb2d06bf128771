"""The one percentile every benchmark prints (``bench.measure``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.measure import percentile


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([], 0.5) == 0.0


def test_an_even_count_has_the_lower_middle_as_median_and_order_does_not_matter() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0
    assert percentile([7.0], 0.99) == 7.0


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50),
    st.floats(0, 1, allow_nan=False),
)
def test_a_percentile_is_a_measured_value_with_that_share_at_or_below_it(
    values: list[float], fraction: float
) -> None:
    found = percentile(values, fraction)
    assert found in values
    assert sum(1 for v in values if v <= found) >= fraction * len(values)
    assert sum(1 for v in values if v < found) < max(fraction * len(values), 1)
