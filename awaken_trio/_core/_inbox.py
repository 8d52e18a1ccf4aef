"""An attempt's inbox: the messages it was sent and has not read, and the bookkeeping of
commands the store holds for it. Made on an attempt's first message, stored command or wait
(most attempts get none), so a run nobody talks to pays one empty slot for it.

The two flags a live command sets (pause, wake) stay on the attempt itself: a delivery to
an attempt without an inbox sets a flag and makes nothing.
"""

from __future__ import annotations

from typing import final

import attrs
import trio

from ._json import JsonValue


@final
@attrs.frozen
class TakenMessages:
    """Messages taken from an attempt's inbox to be handed to its body: carried ones
    (committed with an earlier attempt's pause) and the inbox, with the store's command
    id of each inbox message it holds (None for one delivered in this process)."""

    carried: tuple[JsonValue, ...]
    inbox: tuple[JsonValue, ...]
    inbox_ids: tuple[int | None, ...] | None

    def messages(self) -> list[JsonValue]:
        return [*self.carried, *self.inbox]

    def stored_ids(self) -> tuple[int, ...]:
        if self.inbox_ids is None:
            return ()
        return tuple(i for i in self.inbox_ids if i is not None)

    def stored_messages(self) -> tuple[JsonValue, ...]:
        """The inbox messages the store holds, in order."""
        if self.inbox_ids is None:
            return ()
        return tuple(m for m, i in zip(self.inbox, self.inbox_ids, strict=True) if i is not None)


@final
@attrs.define(eq=False)
class Inbox:
    """Messages not yet read, carried ones first, and the stored commands applied.

    Invariant: ``ids`` is None while every message came from this process; otherwise it has
    one entry per message (the store's command id, or None), and stored messages are in
    the order they were sent. A command id is in ``applied`` once it reached the attempt,
    so none is applied twice.
    """

    # Accepted and not yet read. Those that came from the store carry their command id in
    # `ids` (made on the first such message).
    messages: list[JsonValue] = attrs.field(factory=list)
    ids: list[int | None] | None = None
    # Messages an earlier attempt accepted and did not read, handed over at this start.
    carried: tuple[JsonValue, ...] = ()
    # Set for the body waiting in boundary(wait=True), if one is.
    signal: trio.Event | None = None
    # True while a task waits in boundary(wait=True): only one may.
    waiting: bool = False
    # Stored commands applied to the attempt, and those of them its next commit consumes
    # (deletes from the store): messages once a boundary returned them, pauses and wakes.
    applied: set[int] | None = None
    consumable: list[int] | None = None
    pause_ids: list[int] | None = None

    def add(self, payload: JsonValue, command_id: int | None) -> None:
        messages = self.messages
        if command_id is None and self.ids is None:
            messages.append(payload)
            return
        if self.ids is None:
            self.ids = [None] * len(messages)
        ids = self.ids
        # Stored messages can reach the attempt out of order (those sent here at once,
        # older ones loaded from the store after): each goes before the stored messages
        # with a later id that came since the last message delivered here, so stored
        # messages keep their send order.
        at = len(ids)
        if command_id is not None:
            while at > 0 and (later := ids[at - 1]) is not None and later > command_id:
                at -= 1
        messages.insert(at, payload)
        ids.insert(at, command_id)

    def first_application(self, command_id: int) -> bool:
        """Note that a stored command reached the attempt; False if it already had."""
        if self.applied is None:
            self.applied = set()
        elif command_id in self.applied:
            return False
        self.applied.add(command_id)
        return True

    def consume(self, command_id: int) -> None:
        """The stored command is done with: the attempt's next commit deletes it."""
        if self.consumable is None:
            self.consumable = []
        self.consumable.append(command_id)

    def take_consumed(self) -> tuple[int, ...]:
        if not self.consumable:
            return ()
        taken = tuple(self.consumable)
        self.consumable.clear()
        return taken

    def pause_stored(self, command_id: int) -> None:
        if self.pause_ids is None:
            self.pause_ids = []
        self.pause_ids.append(command_id)

    def pause_honoured(self) -> None:
        """The pause took effect: the stored pauses are done with."""
        if self.pause_ids:
            for command_id in self.pause_ids:
                self.consume(command_id)
            self.pause_ids.clear()

    def has_messages(self) -> bool:
        return bool(self.messages or self.carried)

    def notify(self) -> None:
        """Release a body waiting at ``boundary(wait=True)``."""
        if self.signal is not None:
            self.signal.set()
            self.signal = None

    def holds_stored_messages(self) -> bool:
        ids = self.ids
        return ids is not None and any(i is not None for i in ids)

    def take(self) -> TakenMessages:
        ids = self.ids
        taken = TakenMessages(
            self.carried, tuple(self.messages), None if ids is None else tuple(ids)
        )
        self.carried = ()
        if self.messages:
            self.messages.clear()
            if ids is not None:
                ids.clear()
        return taken

    def put_back(self, taken: TakenMessages) -> None:
        self.carried = (*taken.carried, *self.carried)
        if not taken.inbox:
            return
        arrived = self.messages
        if taken.inbox_ids is not None or self.ids is not None:
            since = self.ids if self.ids is not None else [None] * len(arrived)
            before = taken.inbox_ids if taken.inbox_ids is not None else [None] * len(taken.inbox)
            self.ids = [*before, *since]
        self.messages = [*taken.inbox, *arrived]

    def drain(self) -> list[JsonValue]:
        messages = list(self.carried)
        self.carried = ()
        if self.messages:
            messages.extend(self.messages)
            self.messages.clear()
            if self.ids:
                self.ids.clear()
        return messages

    def unread_local(self) -> list[JsonValue]:
        messages = list(self.carried)
        self.carried = ()
        if self.messages:
            ids = self.ids or [None] * len(self.messages)
            messages.extend(m for m, i in zip(self.messages, ids, strict=True) if i is None)
            self.messages.clear()
            if self.ids:
                self.ids.clear()
        return messages
