"""The relay's rest between looks at a store that notices changes: a commit that controls
a run (a command stored, a run ended elsewhere) ends the rest at once on a store that can
tell (PostgreSQL's NOTIFY payload); other commits wait for the rest to end. A scripted
store on the virtual clock, so the order of looks is exact."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio._core import ClaimSettings, Watched
from awaken_trio.worker._relay import StoreRelay

POLL = 0.05


class ScriptedStore:
    """A store whose version moves when the test says, and which is told of changes and
    controls by the test's events."""

    def __init__(self, *, tells_control: bool) -> None:
        self.version_now = 0
        self.change = trio.Event()
        self.control = trio.Event()
        self.looks: list[float] = []
        self.tells_control = tells_control

    def notices_changes(self) -> bool:
        return True

    async def wait_for_change(self, at_most: float) -> bool:
        with trio.move_on_after(at_most):
            await self.change.wait()
            self.change = trio.Event()
            return True
        return False

    async def version(self) -> int:
        self.looks.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        return self.version_now

    async def commands(self, run_ids: object, after: int = 0) -> list[object]:
        await trio.lowlevel.checkpoint()
        return []

    async def states(self, run_ids: object) -> dict[str, object]:
        await trio.lowlevel.checkpoint()
        return {}


class ControlTelling(ScriptedStore):
    async def wait_for_control(self, at_most: float) -> bool:
        with trio.move_on_after(at_most):
            await self.control.wait()
            self.control = trio.Event()
            return True
        return False


class Host:
    def __init__(self) -> None:
        self.changes = 0

    def watched(self) -> Watched:
        return Watched(())

    def store_changed_elsewhere(self) -> None:
        self.changes += 1


async def _run(store: ScriptedStore) -> list[float]:
    """A change, then (during the rest after its look) a commit the store may mark as a
    control: the times of the looks that follow the change."""
    host = Host()
    relay = StoreRelay(host, store, ClaimSettings("me", 30.0, POLL, 3))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(relay.run)
        await trio.sleep(1.5)  # (between two of its looks at a quiet store)
        store.version_now += 1
        store.looks.clear()
        changed_at = trio.current_time()
        store.change.set()
        await trio.sleep(POLL / 5)  # the change is looked at, the relay rests
        store.version_now += 1
        if store.tells_control:
            store.control.set()  # told as a control only, as PostgreSQL does
        else:
            store.change.set()
        await trio.sleep(3 * POLL)
        nursery.cancel_scope.cancel()
    return [at - changed_at for at in store.looks]


async def test_a_control_during_the_rest_is_looked_at_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    looks = await _run(ControlTelling(tells_control=True))
    assert looks[0] == 0.0
    # The second look comes when the control is told, not when the rest ends.
    assert POLL / 5 <= looks[1] < POLL / 2, looks


async def test_without_control_notices_other_commits_wait_for_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    looks = await _run(ScriptedStore(tells_control=False))
    assert looks[0] == 0.0
    assert looks[1] >= POLL, looks
