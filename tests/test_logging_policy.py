"""The library's logging policy (DESIGN §3.6): loggers under ``awaken_trio``, no handler of
its own, nothing printed (the command line, which talks to a person, aside)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import awaken_trio
import awaken_trio.agent
import awaken_trio.store
import awaken_trio.worker

PACKAGE = Path(awaken_trio.__file__).resolve().parent
# The command line prints to its terminal by design.
TALKS_TO_A_PERSON = ("_cli", "__main__.py")


def library_sources() -> list[Path]:
    return [
        path
        for path in PACKAGE.rglob("*.py")
        if not path.relative_to(PACKAGE).as_posix().startswith(TALKS_TO_A_PERSON)
    ]


def test_no_library_module_prints_or_configures_logging() -> None:
    found: list[str] = []
    for path in library_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in {"print", "addHandler", "basicConfig", "dictConfig", "fileConfig"}:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {name}")
    assert found == []
    assert len(library_sources()) > 20  # the scan saw the package


def test_every_logger_the_library_names_is_under_awaken_trio_and_has_no_handler() -> None:
    names: set[str] = set()
    for path in library_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    assert names >= {"awaken_trio", "awaken_trio.store", "awaken_trio.worker", "awaken_trio.agent"}
    for name in names:
        assert name == "awaken_trio" or name.startswith("awaken_trio."), name
        assert logging.getLogger(name).handlers == [], name
