"""The relay's rest between looks at a store that notices changes: a commit that controls
a run (a command stored, a run ended elsewhere) ends the rest at once on a store that can
tell (PostgreSQL's NOTIFY payload); other commits wait for the rest to end. A scripted
store on the virtual clock, so the order of looks is exact."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import EndCause, RunState
from awaken_trio._core import ClaimSettings, Watched
from awaken_trio.store import ControlLook, StoredCommand
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


class FakeWatched:
    """The attempts a look is read for (as `Watched` gives them)."""

    def __init__(self, run_ids: list[str], *, fresh: bool) -> None:
        self.run_ids = run_ids
        self.fresh = fresh
        self.relayed = False

    def running(self) -> list[str]:
        return self.run_ids

    def mark_relayed(self) -> None:
        self.relayed = True


class LookingHost:
    def __init__(self, watched: FakeWatched) -> None:
        self.current = watched
        self.changes = 0
        self.applied: list[int] = []
        self.ended: list[str] = []

    def watched(self) -> FakeWatched:
        return self.current

    def store_changed_elsewhere(self) -> None:
        self.changes += 1

    def apply_stored(self, command: StoredCommand) -> None:
        self.applied.append(command.id)

    def ended_elsewhere(self, run_id: str, state: object) -> None:
        self.ended.append(run_id)


class LookingStore:
    """A store that reads a whole look in one call: the test sets what the next one finds;
    the three-call path fails the test if the relay takes it."""

    def __init__(self) -> None:
        self.next = ControlLook(version=0)
        self.asked: list[tuple[list[str], int, list[str], bool]] = []

    async def look_at_control(
        self, run_ids: list[str], after: int, running: list[str], *, anyway: bool
    ) -> ControlLook:
        self.asked.append((list(run_ids), after, list(running), anyway))
        await trio.lowlevel.checkpoint()
        return self.next

    async def version(self) -> int:
        raise AssertionError("a store that looks at once is not asked three times")

    commands = states = version


def _command(command_id: int) -> StoredCommand:
    return StoredCommand(id=command_id, run_id="r1", kind="wake", payload=None, reason=None, at=0.0)


async def test_a_store_that_looks_at_once_is_asked_once_per_look() -> None:
    """One call per look: a fresh attempt is read from its first command (``anyway``);
    what the look found is relayed; an unmoved version with nothing found is no change;
    and a look whose version did not move but that found a command (a write landed between
    its reads) still relays it, after the last command id seen."""
    store = LookingStore()
    host = LookingHost(FakeWatched(["r1"], fresh=True))
    relay = StoreRelay(host, store, ClaimSettings("me", 30.0, POLL, 3))  # type: ignore[arg-type]
    cancelled = RunState.Ended(EndCause.Cancelled())
    store.next = ControlLook(version=1, commands=(_command(4),), ended={"r1": cancelled})
    assert await relay.poll() is True
    assert store.asked == [(["r1"], 0, ["r1"], True)]
    assert (host.applied, host.ended, host.changes, host.current.relayed) == ([4], ["r1"], 1, True)
    host.current = FakeWatched(["r1"], fresh=False)
    store.next = ControlLook(version=1)
    assert await relay.poll() is False
    assert store.asked[-1] == (["r1"], 4, ["r1"], False)
    store.next = ControlLook(version=1, commands=(_command(7),))
    assert await relay.poll() is True
    assert (host.applied, host.changes) == ([4, 7], 1)
    store.next = ControlLook(version=2)
    assert await relay.poll() is True
    assert store.asked[-1][1] == 7
    assert host.changes == 2
