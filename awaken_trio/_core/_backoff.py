"""How long to wait before trying again: one value for every loop that backs off (a store
write on a broken connection, a serving loop after a store failure, an idle serving loop
looking less often)."""

from __future__ import annotations

from typing import final

import attrs


def _not_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"a backoff's {attribute.name} must be 0 or more, not {value!r}")


@final
@attrs.frozen
class Backoff:
    """Waits that grow: `first` seconds, then `factor` times the wait before, never more
    than `ceiling`; a loop that gives up does after `tries` waits (None: it never does).

    A value, like psycopg_pool's ``AttemptWithBackoff`` without its state: the loop that
    backs off counts its waits in a row, asks for the next one (`wait`) and whether it
    has had them all (`spent`), and starts counting again after a success.
    """

    first: float = attrs.field(validator=_not_negative)
    ceiling: float = attrs.field(validator=_not_negative)
    factor: float = attrs.field(default=2.0, kw_only=True)
    tries: int | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.factor >= 1:
            raise ValueError(f"a backoff's factor must be 1 or more, not {self.factor!r}")

    def wait(self, waited: int) -> float:
        """Seconds to wait after ``waited`` waits in a row (0: the first wait)."""
        try:
            wait = self.first * self.factor**waited
        except OverflowError:  # (a loop backing off for days: long at its ceiling)
            return self.ceiling
        return min(wait, self.ceiling)

    def spent(self, waited: int) -> bool:
        """Whether a loop that gives up has had its `tries` after ``waited`` waits."""
        return self.tries is not None and waited >= self.tries
