"""No class in the package is longer than 600 lines (``scripts/class_sizes.py``): a class
that grows past it holds more than one concern, and is split into parts that own theirs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "class_sizes.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_no_class_in_the_package_is_longer_than_600_lines() -> None:
    found = _run()
    assert found.returncode == 0, found.stdout
    assert found.stdout == ""


def test_the_check_reports_a_long_class_with_where_it_is(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(8))
    (tmp_path / "long.py").write_text(f"class Short:\n    pass\n\n\nclass Long:\n{body}\n")
    found = _run("--limit", "5", str(tmp_path))
    assert found.returncode == 1
    assert found.stdout == f"{tmp_path / 'long.py'}:5: class Long is 9 lines (limit 5)\n"
    assert _run("--limit", "9", str(tmp_path)).returncode == 0
