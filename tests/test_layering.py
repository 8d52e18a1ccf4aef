"""The kernel is used through its API: no module outside ``_core`` imports ``_core._x``.

Every ``import`` statement is read, wherever it sits (module level, inside a function,
under ``TYPE_CHECKING``), because a lazy import of a private kernel module couples the
two layers as tightly as a top-level one.
"""

from __future__ import annotations

import ast
import pathlib
import re

import awaken_trio

PACKAGE = pathlib.Path(awaken_trio.__file__).parent
PRIVATE_KERNEL = re.compile(r"(?:awaken_trio\.)?_core\._\w+")


def _outside_kernel() -> list[pathlib.Path]:
    return sorted(
        path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] != "_core"
    )


def _private_kernel_imports(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            relative_or_ours = node.level > 0 or node.module.startswith("awaken_trio.")
            if relative_or_ours and PRIVATE_KERNEL.fullmatch(node.module):
                found.append(f"{path.name}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Import):
            found.extend(
                f"{path.name}:{node.lineno} import {alias.name}"
                for alias in node.names
                if PRIVATE_KERNEL.fullmatch(alias.name)
            )
    return found


def test_the_scan_sees_the_package() -> None:
    modules = _outside_kernel()
    names = {path.relative_to(PACKAGE).parts[0] for path in modules}
    assert {"store", "worker", "agent", "testing", "client", "_cli"} <= names


def test_the_scan_finds_a_private_kernel_import(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from .._core._state import Ended\n"
        "def later():\n"
        "    from awaken_trio._core._storage import Commit\n"
        "    import awaken_trio._core._json\n"
        "from .._core import Ended as E\n"
    )
    assert [line.split(" ", 1)[0] for line in _private_kernel_imports(sample)] == [
        "sample.py:1",
        "sample.py:3",
        "sample.py:4",
    ]


def test_no_module_outside_the_kernel_imports_a_private_kernel_module() -> None:
    offenders = [hit for path in _outside_kernel() for hit in _private_kernel_imports(path)]
    assert offenders == [], (
        "import these names from awaken_trio._core (export them in "
        f"_core/__init__.py if they are missing): {offenders}"
    )
