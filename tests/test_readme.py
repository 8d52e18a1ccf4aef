"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_first_example_runs_and_its_assertion_holds() -> None:
    first = _python_blocks()[0]
    assert "trio.run(main)" in first
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(first, str(README), "exec"), namespace)
