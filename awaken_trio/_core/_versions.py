"""Body versions (DESIGN §3.8): which version of a named body a runtime has, which pinned
versions it may run, and the value a bodies mapping gives a versioned body in."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, final

import attrs

from ._errors import InvalidArgument
from ._util import safe_repr

if TYPE_CHECKING:
    from ._attempt import Body


@final
@attrs.frozen
class BodyVersions:
    """The version of a body registered under a name, and the versions of runs it can
    also run (``compatible``). A run's version is pinned by its first attempt; a runtime
    starts an attempt of a run only with a body that `accepts` the pinned one."""

    version: str | None = None
    compatible: frozenset[str | None] = frozenset()

    def accepts(self, pinned: str | None) -> bool:
        """Whether a run pinned to ``pinned`` may run with this body."""
        return pinned == self.version or pinned in self.compatible


UNVERSIONED: Final = BodyVersions()


@final
@attrs.frozen
class VersionedBody:
    """A body with its version, as a value of ``open_runtime(bodies=...)`` or of the
    mapping ``awaken-trio worker`` serves: ``{"answer": VersionedBody(answer_v2,
    version="2", compatible=("1",))}`` is ``runtime.register("answer", answer_v2,
    version="2", compatible=("1",))``."""

    body: Body
    version: str | None = None
    compatible: tuple[str | None, ...] = ()


def checked_versions(name: str, version: object, compatible: object) -> BodyVersions:
    """The `BodyVersions` of ``register(name, ..., version=, compatible=)``, checked."""
    if version is not None and (type(version) is not str or not version):
        raise InvalidArgument(
            f"the version of body {name!r} must be a non-empty str or None, not"
            f" {safe_repr(version)}"
        )
    if isinstance(compatible, str) or not isinstance(compatible, Iterable):
        raise InvalidArgument(
            f"compatible= of body {name!r} must be a tuple of versions (str, or None for runs"
            f" pinned by an unversioned body), not {safe_repr(compatible)}"
        )
    found = tuple(compatible)
    for item in found:
        if item is not None and (type(item) is not str or not item):
            raise InvalidArgument(
                f"compatible= of body {name!r} must hold versions (non-empty str, or None),"
                f" not {safe_repr(item)}"
            )
    if version is None and not found:
        return UNVERSIONED
    return BodyVersions(version, frozenset(found))
