"""Turning what a body raised into an end cause."""

from __future__ import annotations

import re

import trio

from ._attempt import StepCeiling, SuspendAttempt

_INTERRUPTS = (KeyboardInterrupt, SystemExit)
_NOT_ERRORS = (trio.Cancelled, SuspendAttempt, StepCeiling)
_ACRONYM_BOUNDARY = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])")


def error_code(exc: BaseException) -> str:
    """The class name in snake_case, acronyms kept together.

    ``ValueError`` -> ``value_error``, ``HTTPError`` -> ``http_error``,
    ``OAuth2TokenError`` -> ``o_auth2_token_error``.
    """
    return _ACRONYM_BOUNDARY.sub("_", type(exc).__name__).lower()


def single(exc: BaseException) -> BaseException:
    """Unwrap exception groups that hold exactly one exception, recursively."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_leaves(inner))
        return out
    return [exc]


def kind_of(exc: BaseException) -> tuple[str, BaseException]:
    """Classify a body's exception.

    Returns ``(kind, exc)`` where kind is ``"interrupt"`` (KeyboardInterrupt or
    SystemExit anywhere inside), ``"failure"`` (anything but cancellation and our own
    control exceptions; ``exc`` is then the exception to report, group-unwrapped),
    ``"suspend"``, ``"ceiling"`` or ``"cancelled"``.
    """
    if type(exc) is trio.Cancelled:
        return "cancelled", exc  # the common case, without walking a group
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, _INTERRUPTS):
            return "interrupt", leaf
    errors = [leaf for leaf in leaves if not isinstance(leaf, _NOT_ERRORS)]
    if errors:
        if len(errors) == 1:
            return "failure", errors[0]
        # Several real errors: report the group, minus cancellations and control flow.
        if isinstance(exc, BaseExceptionGroup):
            rest = exc.split(lambda e: not isinstance(e, _NOT_ERRORS))[0]
            return "failure", single(rest) if rest is not None else exc
        return "failure", exc
    if any(isinstance(leaf, SuspendAttempt) for leaf in leaves):
        return "suspend", exc
    if any(isinstance(leaf, StepCeiling) for leaf in leaves):
        return "ceiling", exc
    return "cancelled", exc
