"""Whether another process may have committed to the file: a look at the file and its
write-ahead log from the outside, cheap enough to take at every poll.

Asking SQLite (``PRAGMA data_version``) is a job for the store's thread: a hand-over to it
and back, which costs far more CPU than the question when the answer is almost always "no"
(an idle worker polls twenty times a second). Every commit in WAL mode writes the log (and a
checkpoint writes the file), and a write moves the written file's size or modification
time. So the store asks SQLite only when what a ``stat`` of both shows has moved since it
last asked, and still at least every `FULL_POLL_EVERY` seconds whatever it shows.

A file's modification time is kept at the kernel's clock tick (a few milliseconds), so a
commit in the same tick as the look before it leaves the time as it was; and a commit
shows only once it is synced, after its last write. So while the newest time seen is
within `SETTLE` of the moment of the look, SQLite is asked at every poll, until the file
has been still for that long.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
import weakref
from collections.abc import Callable
from typing import Final, final

import attrs
import trio

FULL_POLL_EVERY: Final = 1.0
"""Seconds after which SQLite is asked whatever the files show (a file system that does not
keep modification times, a clock set back)."""

SETTLE: Final = 0.5
"""Seconds a file must have been still before an unchanged look is trusted: longer than a
timestamp's tick, and than the time a commit takes to show after its last write (it is
synced to disk first)."""


@final
@attrs.frozen
class Stat:
    """What a ``stat`` of one file shows: which file, its size and modification time."""

    device: int
    inode: int
    size: int
    mtime_ns: int


@final
@attrs.frozen
class Looks:
    """The store's file and its write-ahead log as seen from outside (None: absent)."""

    file: Stat | None
    log: Stat | None

    def newest_ns(self) -> int:
        return max((s.mtime_ns for s in (self.file, self.log) if s is not None), default=0)


def _stat(path: str) -> Stat | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return Stat(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def look_at(path: str) -> Callable[[], Looks]:
    """A look at the store file ``path`` and its log, as `ChangeWatch` takes it."""
    log = f"{path}-wal"

    def look() -> Looks:
        return Looks(_stat(path), _stat(log))

    return look


@final
class ChangeWatch:
    """Says when the store must ask SQLite whether another connection committed."""

    def __init__(
        self,
        look: Callable[[], Looks],
        *,
        wall_ns: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._look = look
        self._wall_ns = wall_ns
        self._monotonic = monotonic
        self._seen: Looks | None = None
        self._settled = False
        self._asked_at = -FULL_POLL_EVERY

    def due(self) -> bool:
        """Whether to ask SQLite now. When it says so, the look it took stands for what
        the asking will have seen: the caller asks at once (a commit landing meanwhile
        shows as a change at the next look)."""
        looks = self._look()
        now = self._monotonic()
        if looks == self._seen and self._settled and now - self._asked_at < FULL_POLL_EVERY:
            return False
        self._seen = looks
        self._settled = looks.newest_ns() < self._wall_ns() - int(SETTLE * 1e9)
        self._asked_at = now
        return True

    def forget(self) -> None:
        """Ask SQLite at the next poll, whatever the files show (after an asking failed)."""
        self._seen = None


# ---------------------------------------------------------------------------- notices

_IN_MODIFY: Final = 0x002
_IN_ATTRIB: Final = 0x004
_IN_MOVED_FROM: Final = 0x040
_IN_MOVED_TO: Final = 0x080
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_DIRECTORY_MASK: Final = (
    _IN_MODIFY | _IN_ATTRIB | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
)


@final
class FileNotices:
    """The kernel's word (Linux ``inotify``) that a file in the store's directory was
    written, created, removed or renamed: every commit in WAL mode writes the log, so
    another process's commit wakes a waiter at once, and an idle one sleeps.

    Processes that share an SQLite file in WAL mode are on one machine (they share its
    memory through the ``-shm`` file), so the kernel sees every write any of them makes.
    A notice is only a hint to look (`ChangeWatch`, then SQLite): other files in the
    directory wake a waiter too, and a waiter still looks at least every so often.
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        # Notices dropped without being closed must not keep their descriptor.
        self._finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, directory: str) -> FileNotices | None:
        """Notices for ``directory``; None where the kernel gives none (not Linux, or
        out of inotify instances): the caller polls instead."""
        if sys.platform != "linux":
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
        add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        add.restype = ctypes.c_int
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        if add(fd, os.fsencode(directory), _DIRECTORY_MASK) < 0:
            os.close(fd)
            return None
        return cls(fd)

    async def wait(self, at_most: float) -> bool:
        """Return once something in the directory changed since the last call (at once
        if it already has): True; or after ``at_most`` seconds with no notice: False."""
        fd = self._fd
        if fd is None:
            await trio.sleep(at_most)
            return False
        if self._drain(fd):
            await trio.lowlevel.checkpoint()
            return True
        with trio.move_on_after(at_most):
            try:
                await trio.lowlevel.wait_readable(fd)
            except trio.ClosedResourceError:
                return False  # closed meanwhile (the store was closed)
        return self._drain(fd)

    def _drain(self, fd: int) -> bool:
        """Read every pending notice; whether there was any."""
        found = False
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return found
            except OSError:
                return True  # (the queue overflowed, say): look, to be sure
            if not chunk:
                return found
            found = True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            self._finalizer.detach()
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
