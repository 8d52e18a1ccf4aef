"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from awaken_trio.testing import CancellationViolation, explore_cancellation

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_first_example_runs_and_its_assertion_holds() -> None:
    first = _python_blocks()[0]
    assert "trio.run(main)" in first
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(first, str(README), "exec"), namespace)


def test_the_cancellation_safety_example_passes_its_exploration() -> None:
    [block] = [b for b in _python_blocks() if "async def test_transfer" in b]
    namespace: dict[str, object] = {"__name__": "readme_explore_example"}
    exec(compile(block, str(README), "exec"), namespace)
    test = namespace["test_transfer_is_cancellation_safe"]
    assert callable(test)
    trio.run(test, explore_cancellation)


def test_the_cancellation_safety_example_finds_the_lock_left_held() -> None:
    [block] = [b for b in _python_blocks() if "async def test_transfer" in b]
    # The same body with its lock released only on the normal path.
    broken = block.replace("    try:\n", "    if True:\n").replace(
        "    finally:\n", "    if True:\n"
    )
    assert broken != block
    namespace: dict[str, object] = {"__name__": "readme_explore_example"}
    exec(compile(broken, str(README), "exec"), namespace)
    test = namespace["test_transfer_is_cancellation_safe"]
    assert callable(test)
    with pytest.raises(CancellationViolation, match="the lock is still held"):
        trio.run(test, explore_cancellation)
