"""`Backoff`: the waits of every loop that backs off (a store's retries, the serving loop's),
as one value."""

from __future__ import annotations

import attrs
import pytest

from awaken_trio._core import Backoff


def test_the_waits_grow_by_the_factor_up_to_the_ceiling() -> None:
    backoff = Backoff(0.05, 0.3)
    assert [backoff.wait(n) for n in range(5)] == pytest.approx([0.05, 0.1, 0.2, 0.3, 0.3])
    assert [Backoff(1.0, 10.0, factor=3.0).wait(n) for n in range(4)] == [1.0, 3.0, 9.0, 10.0]
    assert [Backoff(0.0, 0.0).wait(n) for n in range(3)] == [0.0, 0.0, 0.0]


def test_a_wait_far_along_is_the_ceiling_and_never_overflows() -> None:
    assert Backoff(0.05, 5.0).wait(10_000) == 5.0
    assert Backoff(0.05, 5.0, factor=1.5).wait(2**40) == 5.0


def test_a_ceiling_below_the_first_wait_caps_it_too() -> None:
    assert Backoff(8.0, 5.0).wait(0) == 5.0


def test_a_loop_that_gives_up_has_spent_its_tries() -> None:
    backoff = Backoff(0.1, 1.0, tries=3)
    assert [backoff.spent(n) for n in range(5)] == [False, False, False, True, True]
    assert not Backoff(0.1, 1.0).spent(10**9)


def test_a_backoff_is_a_frozen_value() -> None:
    backoff = Backoff(0.1, 1.0, tries=3)
    assert backoff == Backoff(0.1, 1.0, factor=2.0, tries=3)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        backoff.first = 0.2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("first", "ceiling", "factor", "message"),
    [
        (-1.0, 1.0, 2.0, "first must be 0 or more, not -1.0"),
        (0.1, float("nan"), 2.0, "ceiling must be 0 or more, not nan"),
        (0.1, 1.0, 0.5, "factor must be 1 or more, not 0.5"),
    ],
)
def test_a_backoff_that_would_shrink_or_go_negative_is_refused(
    first: float, ceiling: float, factor: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(first, ceiling, factor=factor)
