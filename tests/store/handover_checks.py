"""The package's durable stores hand an attempt's start the commands stored for its run
(``Accepted.commands``), read in the start's own transaction, so the runtime needs no read
of its own before the body runs. The contract lets a store leave them to the runtime
(None); these checks hold the package's own stores to handing them over."""

from __future__ import annotations

from awaken_trio import FrozenDict
from awaken_trio.store import Accepted, Claim, DurableStore, Fence, StoredCommand
from awaken_trio.testing._checks import LIVE, NAMES, _accepted, _assert_frozen, _claimed, _new
from awaken_trio.testing._commits import Queued, run


class HandsOverStoredCommands:
    """Mixed into a `DurableStoreContract` subclass (its ``store``)."""

    async def test_a_start_hands_over_the_commands_stored_while_the_run_was_queued(
        self, store: DurableStore
    ) -> None:
        for run_id in ("q", "none", "other"):
            await _accepted(store, _new(run_id, Queued(), generation=0))
        payload = FrozenDict({"text": ["hi", {"n": 1}]})
        message = await store.post_command("q", "message", payload, None, 2.0)
        paused = await store.post_command("q", "pause", None, "hold", 2.5)
        woken = await store.post_command("other", "wake", None, "", 2.6)
        cancel = await store.post_command("q", "cancel", None, "stop", 3.0)
        assert isinstance(message, int)
        assert isinstance(paused, int)
        assert isinstance(woken, int)
        assert isinstance(cancel, int)
        # Two starts in one batch: each is handed its own run's commands, oldest first.
        batch = [
            run(run_id, 1, at=4.0, take_messages=True, claim=Claim("a", 10.0))
            for run_id in ("q", "none")
        ]
        q, none = await store.apply(batch)
        assert isinstance(q, Accepted)
        assert isinstance(none, Accepted)
        assert q.commands == (
            StoredCommand(message, "q", "message", {"text": ["hi", {"n": 1}]}, None, 2.0),
            StoredCommand(paused, "q", "pause", None, "hold", 2.5),
            StoredCommand(cancel, "q", "cancel", None, "stop", 3.0),
        )
        _assert_frozen(q.commands[0].payload, "a handed-over command's payload")
        assert none.commands == ()
        # Handed over, not taken: they stay stored until consumed or the run ends.
        assert [c.id for c in await store.commands(["q", "other"])] == [
            message,
            paused,
            woken,
            cancel,
        ]

    async def test_a_recovered_run_s_start_hands_over_what_the_lost_attempt_left(
        self, store: DurableStore
    ) -> None:
        await _claimed(store, "r", "a")
        left = await store.post_command("r", "message", "for whoever runs it", None, 2.0)
        assert isinstance(left, int)
        await store.release("a", "r")  # its owner is lost: recovery takes the run up
        (recovered,) = await store.recover("b", NAMES, 3.0, LIVE, 3, 10)
        fence = Fence("r", "b", recovered.epoch)
        landed = await _accepted(store, run("r", 2, at=4.0, fence=fence, take_messages=True))
        assert landed.accepted.commands == (
            StoredCommand(left, "r", "message", "for whoever runs it", None, 2.0),
        )

    async def test_a_commit_that_starts_no_attempt_hands_nothing_over(
        self, store: DurableStore
    ) -> None:
        epoch = await _claimed(store, "r", "a")
        await store.post_command("r", "message", "m", None, 2.0)
        landed = await _accepted(store, run("r", 1, at=3.0, fence=Fence("r", "a", epoch)))
        assert landed.accepted.commands is None
        created = await _accepted(store, _new("fresh"))  # nothing can be stored before it
        assert created.accepted.commands is None
