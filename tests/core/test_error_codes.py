"""`RunError.error_code`: the one name an error goes by, in a run's `Failed` end and in the
faces' error objects."""

from __future__ import annotations

import pytest

from awaken_trio import (
    EndCause,
    InvalidArgument,
    RunContext,
    RunError,
    RunState,
    UnknownRun,
    open_runtime,
)


class HTTPError(Exception):
    pass


class OAuth2TokenError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ValueError("x"), "value_error"),
        (HTTPError(), "http_error"),
        (OAuth2TokenError(), "o_auth2_token_error"),
        (RunError("rate_limited", "slow down"), "rate_limited"),
        (UnknownRun("r"), "unknown_run"),
        (InvalidArgument("bad"), "invalid_argument"),
    ],
)
def test_code_of_names_any_error(exc: BaseException, code: str) -> None:
    assert RunError.error_code(exc) == code


async def test_a_failed_run_ends_with_the_code_of_its_error() -> None:
    async def body(ctx: RunContext) -> object:
        raise HTTPError("teapot")

    async with open_runtime() as runtime:
        state = await runtime.execute(body)
    assert state == RunState.Ended(EndCause.Failed(RunError.error_code(HTTPError()), "teapot"))
