"""A look for work on the PostgreSQL store takes the runs it hands out out of other
runtimes' looks for a moment (``reserved``, schema version 7): workers looking at once are
handed different runs, the looking runtime still sees its own, and runs it did not claim
go to others once the moment has passed. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import attrs
import trio

from awaken_trio import RetryPolicy
from awaken_trio.store import Accepted
from awaken_trio.store.postgres._reads import RESERVED_FOR
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued


async def test_workers_looking_at_once_are_handed_different_runs(
    stores: list[PostgresStore],
) -> None:
    results = await stores[0].apply([new_queued(f"r{i}") for i in range(40)])
    assert all(isinstance(r, Accepted) for r in results)
    found: list[list[str]] = []

    async def look(store: PostgresStore) -> None:
        records = await store.runnable({"job"}, 2.0, 10)
        found.append([r.run_id for r in records])

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for store in stores:
                nursery.start_soon(look, store)
    handed = [run_id for one in found for run_id in one]
    assert len(handed) == len(set(handed)) == 40  # each run to one worker, all handed out


async def test_the_looking_runtime_sees_its_own_and_others_see_them_after_a_moment(
    stores: list[PostgresStore], offset: list[float]
) -> None:
    here, there = stores[0], stores[1]
    await here.apply([new_queued("a"), new_queued("b")])
    with trio.fail_after(30):
        assert [r.run_id for r in await here.runnable({"job"}, 2.0, 1)] == ["a"]
        assert [r.run_id for r in await there.runnable({"job"}, 2.0, 10)] == ["b"]
        # Not claimed: its own look hands it out again ...
        assert [r.run_id for r in await here.runnable({"job"}, 2.0, 10)] == ["a"]
        assert [r.run_id for r in await there.runnable({"job"}, 2.0, 10)] == ["b"]
        offset[0] = RESERVED_FOR + 1.0  # ... and once the moment has passed, so do others'
        assert [r.run_id for r in await stores[2].runnable({"job"}, 2.0, 10)] == ["a", "b"]


async def test_a_reservation_holds_for_the_generation_it_was_handed_out_at(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """A run handed out, then claimed and run (its generation moved on), is free to the
    next look once it is runnable again, whoever reserved it (here its generation is moved
    by hand, the run left runnable)."""
    import psycopg

    here, there = stores[0], stores[1]
    await here.apply([new_queued("a")])
    with trio.fail_after(30):
        assert [r.run_id for r in await here.runnable({"job"}, 2.0, 10)] == ["a"]
        assert await there.runnable({"job"}, 2.0, 10) == []

        def move_on() -> None:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("UPDATE awaken.runs SET generation = 1 WHERE run_id = 'a'")

        await trio.to_thread.run_sync(move_on)
        assert [r.run_id for r in await there.runnable({"job"}, 2.0, 10)] == ["a"]


async def test_a_look_s_records_are_the_runs_records_field_for_field(
    stores: list[PostgresStore],
) -> None:
    """A look reads each run's row and the rest of its record in one row of columns, each
    column once (``HELD_RECORD``): its records are the ones `load` reads, every field set,
    whether the look holds its runs or reserves them."""
    store = stores[0]
    rich = new_queued("rich")
    assert rich.new_run is not None
    rich = attrs.evolve(
        rich,
        at=5.25,
        new_run=attrs.evolve(
            rich.new_run,
            input={"question": "why", "n": 3},
            max_steps=9,
            checkpoint={"at": "the fork"},
            forked_from={"run_id": "source", "seq": 4},
            deadline=1e12,
            body_version="v2",
            retry=RetryPolicy(attempts=4),
        ),
    )
    with trio.fail_after(30):
        await store.apply([rich, new_queued("plain")])
        loaded = [await store.load(run_id) for run_id in ("rich", "plain")]
        assert loaded[0] is not None
        assert loaded[0].input == {"question": "why", "n": 3}
        assert loaded[0].forked_from == {"run_id": "source", "seq": 4}
        assert loaded[0].retry == RetryPolicy(attempts=4)
        async with store.looking({"job"}, 2.0, 10) as held:
            assert held == loaded
        assert await store.runnable({"job"}, 2.0, 10) == loaded
