"""The stream rules of a `StreamingStore` as a test class (see `StreamStoreContract`).

Every check talks to the store through the protocol only: ``apply`` with commits carrying
`StreamDraft` chunks, ``read_chunks``, and ``prune`` where the store has it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from .. import EndCause, FrozenDict, FrozenList, JsonValue, RunState, StreamChunk
from ..store import (
    Accepted,
    Commit,
    CommitResult,
    Expect,
    NewRun,
    PruningStore,
    Rejected,
    RejectReason,
    StreamDraft,
    StreamingStore,
    StreamPage,
)

Running = RunState.Running
Queued = RunState.Queued
Ended = RunState.Ended

DONE = Ended(EndCause.NaturalEnd())
CANCELLED = Ended(EndCause.Cancelled())


def _create(run_id: str, *, parent: str | None = None, root: str | None = None) -> Commit:
    return Commit(
        run_id=run_id,
        state=Running(1),
        generation=1,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(f"thread-{run_id}", parent, None, None, None, root),
    )


def _chunks(
    run_id: str,
    *drafts: StreamDraft,
    generation: int = 1,
    at: float = 2.0,
    state: RunState | None = None,
    expect: Expect | None = None,
    **changes: object,
) -> Commit:
    """A commit of attempt ``generation`` carrying ``drafts`` (a stream commit: no state
    change, no event), or an end or other change when ``state`` is given."""
    return Commit(
        run_id=run_id,
        state=Running(generation) if state is None else state,
        generation=generation,
        expect=Expect(generation=generation, state=Running) if expect is None else expect,
        at=at,
        announce=state is not None,
        chunks=drafts,
        **changes,  # type: ignore[arg-type]
    )


def _draft(channel: str, *values: JsonValue, keep: bool = True) -> StreamDraft:
    return StreamDraft(channel, tuple(values), keep)


async def _apply(store: StreamingStore, *commits: Commit) -> list[CommitResult]:
    results = await store.apply(list(commits))
    assert len(results) == len(commits)
    return results


async def _accepted(store: StreamingStore, *commits: Commit) -> None:
    for result in await _apply(store, *commits):
        assert isinstance(result, Accepted), result


async def _page(
    store: StreamingStore, run_id: str, channel: str, after: int = 0, limit: int = 1000
) -> StreamPage:
    page = await store.read_chunks(run_id, channel, after, limit)
    assert page is not None, f"the store does not hold run {run_id!r}"
    assert isinstance(page, StreamPage)
    return page


def _seen(chunks: Sequence[StreamChunk]) -> list[tuple[int, int, str, JsonValue]]:
    return [(c.offset, c.generation, c.kind, c.value) for c in chunks]


@pytest.mark.trio
class StreamStoreContract:
    """The stream rules every `StreamingStore` keeps, as tests. Subclass it and override
    ``store`` (a new, empty store per test), as with `StoreContract`.

    What a store must do:

    * Offsets: an accepted commit's chunks (``Commit.chunks``, `StreamDraft` values) are
      written at their channel's next offsets, 1, 2, ... per run and channel, in the
      order of the drafts, at the commit's generation and ``at``, kind ``"data"``.
    * Reset: the first chunk a generation writes on a channel another generation wrote
      last comes after a ``"reset"`` chunk of that generation (value None).
    * End: the commit that ends a run (any ``Ended`` commit, a descendant ended with its
      ancestor included) writes, after its own chunks, an ``"end"`` chunk (value None) of
      its generation on every channel the run wrote, and none on the others.
    * ``keep=False``: a channel whose last draft said so keeps only its ``"end"`` chunk
      once the run ended.
    * Fenced: a rejected commit writes none of its chunks.
    * Reading (``read_chunks``): the chunks after ``after``, in offset order, at most
      ``limit``, as frozen `StreamChunk` values; ``last`` the channel's last offset (0
      when the run never wrote it), ``ended`` whether the run has ended; None for a run
      the store does not hold.
    * Prune (a `PruningStore`): a pruned run's chunks go with it.
    """

    @pytest.fixture
    def store(self) -> StreamingStore:
        """The store under test: a new, empty one for each test. Subclasses override it."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `store` fixture to give each test"
            " a new, empty store (see awaken_trio.testing.StreamStoreContract)"
        )

    async def test_the_store_keeps_streams(self, store: StreamingStore) -> None:
        assert isinstance(store, StreamingStore)

    async def test_chunks_take_their_channels_next_offsets(self, store: StreamingStore) -> None:
        await _accepted(store, _create("r1"))
        await _accepted(
            store,
            _chunks("r1", _draft("output", "a", "b"), _draft("agent.tokens", {"t": 1})),
            _chunks("r1", _draft("output", "c"), _draft("output", "d", "e"), at=3.0),
        )
        page = await _page(store, "r1", "output")
        assert _seen(page.chunks) == [
            (1, 1, "data", "a"),
            (2, 1, "data", "b"),
            (3, 1, "data", "c"),
            (4, 1, "data", "d"),
            (5, 1, "data", "e"),
        ]
        assert [c.at for c in page.chunks] == [2.0, 2.0, 3.0, 3.0, 3.0]
        assert page.last == 5
        assert page.ended is False
        tokens = await _page(store, "r1", "agent.tokens")
        assert _seen(tokens.chunks) == [(1, 1, "data", {"t": 1})]
        assert tokens.last == 1

    async def test_values_come_back_equal_and_frozen(self, store: StreamingStore) -> None:
        values: list[JsonValue] = [None, True, 7, 2.5, "tëxt", [1, {"a": [2]}], {"k": {"n": None}}]
        await _accepted(store, _create("r1"), _chunks("r1", _draft("output", *values)))
        page = await _page(store, "r1", "output")
        assert [c.value for c in page.chunks] == values
        for chunk in page.chunks:
            assert isinstance(chunk, StreamChunk)
            if isinstance(chunk.value, list | dict):
                assert isinstance(chunk.value, FrozenList | FrozenDict)
                with pytest.raises(TypeError):
                    chunk.value.clear()

    async def test_a_later_generation_starts_after_a_reset(self, store: StreamingStore) -> None:
        await _accepted(store, _create("r1"), _chunks("r1", _draft("output", "a", "b")))
        # The attempt pauses; the next one (generation 2) streams on.
        await _accepted(
            store,
            _chunks("r1", state=Queued(), expect=Expect(generation=1, state=Running)),
            _chunks("r1", state=Running(2), generation=2, expect=Expect(state=Queued)),
            _chunks("r1", _draft("output", "c"), generation=2, at=5.0),
            _chunks("r1", _draft("output", "d"), generation=2, at=6.0),
        )
        page = await _page(store, "r1", "output")
        assert _seen(page.chunks) == [
            (1, 1, "data", "a"),
            (2, 1, "data", "b"),
            (3, 2, "reset", None),
            (4, 2, "data", "c"),
            (5, 2, "data", "d"),
        ]
        assert page.chunks[2].at == 5.0

    async def test_a_channel_a_generation_opens_first_needs_no_reset(
        self, store: StreamingStore
    ) -> None:
        await _accepted(
            store,
            _create("r1"),
            _chunks("r1", _draft("output", "a")),
            _chunks("r1", state=Queued()),
            _chunks("r1", state=Running(2), generation=2, expect=Expect(state=Queued)),
            _chunks("r1", _draft("other", "x"), generation=2),
        )
        assert _seen((await _page(store, "r1", "other")).chunks) == [(1, 2, "data", "x")]

    async def test_the_end_adds_an_end_chunk_to_every_channel_written(
        self, store: StreamingStore
    ) -> None:
        await _accepted(
            store,
            _create("r1"),
            _chunks("r1", _draft("output", "a"), _draft("second", "z")),
        )
        await _accepted(store, _chunks("r1", _draft("output", "b"), state=DONE, at=9.0))
        page = await _page(store, "r1", "output")
        assert _seen(page.chunks) == [
            (1, 1, "data", "a"),
            (2, 1, "data", "b"),
            (3, 1, "end", None),
        ]
        assert page.chunks[-1].at == 9.0
        assert page.ended is True
        assert page.last == 3
        assert _seen((await _page(store, "r1", "second")).chunks) == [
            (1, 1, "data", "z"),
            (2, 1, "end", None),
        ]
        unwritten = await _page(store, "r1", "never")
        assert unwritten == StreamPage((), 0, True)

    async def test_an_end_committed_elsewhere_ends_the_streams_too(
        self, store: StreamingStore
    ) -> None:
        await _accepted(store, _create("r1"), _chunks("r1", _draft("output", "a")))
        # A cancel committed by another runtime: no chunks of its own.
        await _accepted(store, _chunks("r1", state=CANCELLED, expect=Expect(generation=1)))
        assert _seen((await _page(store, "r1", "output")).chunks) == [
            (1, 1, "data", "a"),
            (2, 1, "end", None),
        ]

    async def test_descendants_ended_with_their_ancestor_end_their_streams(
        self, store: StreamingStore
    ) -> None:
        await _accepted(
            store,
            _create("root"),
            _create("child", parent="root", root="root"),
            _create("grandchild", parent="child", root="root"),
            _chunks("child", _draft("output", "c")),
            _chunks("grandchild", _draft("output", "g")),
        )
        await _accepted(
            store,
            _chunks("root", state=CANCELLED, end_descendants="parent_ended"),
        )
        for run_id, value in (("child", "c"), ("grandchild", "g")):
            page = await _page(store, run_id, "output")
            assert _seen(page.chunks) == [(1, 1, "data", value), (2, 1, "end", None)]
            assert page.ended

    async def test_a_channel_not_kept_keeps_only_its_end(self, store: StreamingStore) -> None:
        await _accepted(
            store,
            _create("r1"),
            _chunks("r1", _draft("scratch", "a", "b", keep=False), _draft("output", "k")),
        )
        mid = await _page(store, "r1", "scratch")
        assert _seen(mid.chunks) == [(1, 1, "data", "a"), (2, 1, "data", "b")]
        await _accepted(store, _chunks("r1", _draft("scratch", "c", keep=False), state=DONE))
        page = await _page(store, "r1", "scratch")
        assert _seen(page.chunks) == [(4, 1, "end", None)]
        assert page.last == 4
        assert _seen((await _page(store, "r1", "scratch", after=3)).chunks) == [(4, 1, "end", None)]
        assert (await _page(store, "r1", "scratch", after=4)).chunks == ()
        kept = await _page(store, "r1", "output")
        assert _seen(kept.chunks) == [(1, 1, "data", "k"), (2, 1, "end", None)]

    async def test_a_rejected_commit_writes_none_of_its_chunks(self, store: StreamingStore) -> None:
        await _accepted(store, _create("r1"), _chunks("r1", _draft("output", "a")))
        stale, fine = await _apply(
            store,
            _chunks("r1", _draft("output", "stale"), generation=2),
            _chunks("r1", _draft("output", "b")),
        )
        assert stale == Rejected(RejectReason.STALE, Running(1))
        assert isinstance(fine, Accepted)
        await _accepted(store, _chunks("r1", state=DONE))
        (late,) = await _apply(store, _chunks("r1", _draft("output", "late")))
        assert late == Rejected(RejectReason.ENDED, DONE)
        assert _seen((await _page(store, "r1", "output")).chunks) == [
            (1, 1, "data", "a"),
            (2, 1, "data", "b"),
            (3, 1, "end", None),
        ]

    async def test_a_page_starts_after_the_offset_and_holds_at_most_the_limit(
        self, store: StreamingStore
    ) -> None:
        await _accepted(
            store,
            _create("r1"),
            _chunks("r1", _draft("output", *range(1, 8))),
            _chunks("r1", _draft("output", *range(8, 11))),
        )
        page = await _page(store, "r1", "output", after=3, limit=4)
        assert [c.offset for c in page.chunks] == [4, 5, 6, 7]
        assert [c.value for c in page.chunks] == [4, 5, 6, 7]
        page = await _page(store, "r1", "output", after=6, limit=3)
        assert [c.offset for c in page.chunks] == [7, 8, 9]
        page = await _page(store, "r1", "output", after=9, limit=100)
        assert [c.offset for c in page.chunks] == [10]
        page = await _page(store, "r1", "output", after=10)
        assert page == StreamPage((), 10, False)
        page = await _page(store, "r1", "output", after=50)
        assert page.chunks == ()

    async def test_a_runs_channels_are_listed_in_the_order_they_were_first_written(
        self, store: StreamingStore
    ) -> None:
        assert await store.stream_channels("ghost") is None
        await _accepted(store, _create("r1"))
        assert await store.stream_channels("r1") == []
        await _accepted(
            store,
            _chunks("r1", _draft("zeta", 1), _draft("alpha", 2), at=2.0),
            _chunks("r1", _draft("middle", 3), _draft("zeta", 4), at=3.0),
        )
        assert await store.stream_channels("r1") == ["alpha", "zeta", "middle"]

    async def test_an_unknown_run_has_no_page(self, store: StreamingStore) -> None:
        assert await store.read_chunks("ghost", "output", 0, 10) is None
        await _accepted(store, _create("r1"))
        assert await _page(store, "r1", "output") == StreamPage((), 0, False)

    async def test_a_pruned_run_takes_its_chunks_with_it(self, store: StreamingStore) -> None:
        if not isinstance(store, PruningStore):
            pytest.skip("the store cannot prune runs (it is not a PruningStore)")
        await _accepted(
            store,
            _create("r1"),
            _chunks("r1", _draft("output", "a")),
            _chunks("r1", state=DONE, at=5.0),
        )
        assert await store.prune(10.0) == 1
        assert await store.read_chunks("r1", "output", 0, 10) is None
        # A run of the same id written afterwards starts its stream from nothing.
        await _accepted(store, _create("r1"), _chunks("r1", _draft("output", "new")))
        assert _seen((await _page(store, "r1", "output")).chunks) == [(1, 1, "data", "new")]
