"""The store rules (``awaken_trio.store._rules``) stand alone: they import nothing from
``store/``, so every store, the package's and a third party's, builds on them without a
cycle, and no store's representation leaks into them."""

from __future__ import annotations

import ast
import pathlib

import awaken_trio.store._rules as rules

RULES = pathlib.Path(rules.__file__)


def _store_imports(source: str) -> list[str]:
    """The imports in ``source`` that reach into ``awaken_trio.store``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if (node.level == 1) or (
                node.level == 0
                and (module == "awaken_trio.store" or module.startswith("awaken_trio.store."))
            ):
                found.append(f"{node.lineno}: from {'.' * node.level}{module}")
        elif isinstance(node, ast.Import):
            found.extend(
                f"{node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name == "awaken_trio.store" or alias.name.startswith("awaken_trio.store.")
            )
    return found


def test_the_scan_finds_an_import_from_the_store_package() -> None:
    sample = (
        "from .._core import Ended\n"
        "from ._codec import dump_json\n"
        "from . import _memory\n"
        "def later():\n"
        "    from awaken_trio.store.sqlite._store import SQLiteStore\n"
        "    import awaken_trio.store.memory._store\n"
    )
    assert [line.split(":")[0] for line in _store_imports(sample)] == ["2", "3", "5", "6"]


def test_the_rules_import_nothing_from_the_store_package() -> None:
    assert _store_imports(RULES.read_text()) == []
