"""A third-party store is written against public names only: the durable store protocol and
its values are public in ``awaken_trio.store``, and the contract suites a store runs
(``awaken_trio.testing``) are built on public names alone, so nothing they hand a store or
expect back is a private kernel type."""

from __future__ import annotations

import ast
import pathlib

import pytest

import awaken_trio
import awaken_trio.store
import awaken_trio.testing
from awaken_trio import _core

TESTING = pathlib.Path(awaken_trio.testing.__file__).parent
CONTRACTS = ["_store_contract.py", "_durable_contract.py"]
DURABLE_NAMES = ["DurableStore", "Fence", "Claim", "StoredCommand", "Recovered", "CommandKind"]


def _package_imports(source: str) -> list[str]:
    """The modules of the package that ``source`` imports from, as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level > 0 or module.split(".")[0] == "awaken_trio":
                found.append("." * node.level + module)
    return found


@pytest.mark.parametrize("name", DURABLE_NAMES)
def test_the_durable_protocol_is_public_in_the_store_package(name: str) -> None:
    assert name in awaken_trio.store.__all__
    assert getattr(awaken_trio.store, name) is getattr(_core, name)


@pytest.mark.parametrize("name", [n for n in DURABLE_NAMES if n != "CommandKind"])
def test_a_durable_protocol_name_reports_the_store_package(name: str) -> None:
    assert getattr(awaken_trio.store, name).__module__ == "awaken_trio.store"


def test_the_scan_sees_a_private_import() -> None:
    assert _package_imports("from .._core import Fence\nfrom .. import RunState\n") == [
        ".._core",
        "..",
    ]


@pytest.mark.parametrize("contract", CONTRACTS)
def test_a_contract_suite_imports_public_modules_only(contract: str) -> None:
    imported = _package_imports((TESTING / contract).read_text())
    assert imported, "the scan found no import of the package"
    allowed = {"..", "..store", "awaken_trio", "awaken_trio.store"}
    # Sibling modules of the testing package (one contract builds on the other).
    private = [m for m in imported if m not in allowed and not m.startswith(".")]
    private += [m for m in imported if m.startswith("..") and m not in allowed]
    assert private == []
