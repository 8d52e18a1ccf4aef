"""The README's development line (``ruff``, ``mypy``) works after the quick start's install
of the ``[test]`` extra alone: every third-party module that a file mypy checks imports is
installed by ``[project] dependencies`` and ``[test]`` (or their own requirements), has a
stub in ``typings/``, or is covered by an ``ignore_missing_imports`` override in
``[tool.mypy]``. Read from pyproject.toml, the imports and the installed distributions'
metadata; no network."""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def normal(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def checked_files(config: dict[str, Any]) -> list[Path]:
    found: list[Path] = []
    for entry in config["tool"]["mypy"]["files"]:
        path = ROOT / entry
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


@functools.cache
def imported_tops(files: tuple[Path, ...]) -> dict[str, list[Path]]:
    """Each top-level module name imported (absolutely) by ``files``, with where: every
    import mypy reads, under ``TYPE_CHECKING`` and ``try`` included."""
    found: dict[str, list[Path]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], []).append(path)
    return found


def first_party(files: Iterable[Path], config: dict[str, Any]) -> set[str]:
    """Names mypy finds among the checked files themselves: the checked folders and
    packages, and a script folder's sibling modules (``benchmarks/bench_runtime.py``)."""
    names = {Path(entry).parts[0] for entry in config["tool"]["mypy"]["files"]}
    names |= {path.stem for path in files}
    return names


def stubbed(config: dict[str, Any]) -> set[str]:
    stubs = ROOT / config["tool"]["mypy"].get("mypy_path", "typings")
    return {path.name.removesuffix(".pyi") for path in stubs.iterdir()} if stubs.is_dir() else set()


def ignored_patterns(config: dict[str, Any]) -> list[str]:
    patterns: list[str] = []
    for override in config["tool"]["mypy"].get("overrides", []):
        if override.get("ignore_missing_imports"):
            module = override["module"]
            patterns += [module] if isinstance(module, str) else module
    return patterns


def requirement_closure(requirements: Iterable[str]) -> set[str]:
    """The distributions ``requirements`` install, with everything they require in turn
    (markers evaluated here, extras followed), by the installed metadata."""
    seen: set[tuple[str, str]] = set()
    found: set[str] = set()
    pending = [(Requirement(text), "") for text in requirements]
    while pending:
        requirement, extra = pending.pop()
        marker = requirement.marker
        if marker is not None and not marker.evaluate({"extra": extra}):
            continue
        name = normal(requirement.name)
        found.add(name)
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) in seen:
                continue
            seen.add((name, wanted))
            try:
                requires = importlib.metadata.requires(requirement.name) or []
            except importlib.metadata.PackageNotFoundError:
                continue  # not installed here: its own requirements are not known
            pending += [(Requirement(text), wanted) for text in requires]
    return found


@functools.cache
def providers() -> dict[str, set[str]]:
    """Top-level module name -> the (normalised) distributions that install it."""
    return {
        module: {normal(dist) for dist in dists}
        for module, dists in importlib.metadata.packages_distributions().items()
    }


def uncovered(config: dict[str, Any]) -> Iterator[str]:
    """A line for each third-party module mypy would not find after the [test] install."""
    project = config["project"]
    closure = requirement_closure(
        [*project["dependencies"], *project["optional-dependencies"]["test"]]
    )
    files = checked_files(config)
    local = first_party(files, config) | stubbed(config)
    patterns = ignored_patterns(config)
    by_module = providers()
    for module, where in sorted(imported_tops(tuple(files)).items()):
        if module in sys.stdlib_module_names or module in local or module == "__future__":
            continue
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            continue
        if by_module.get(module, set()) & closure:
            continue
        places = ", ".join(sorted({str(path.relative_to(ROOT)) for path in where})[:3])
        dists = ", ".join(sorted(by_module.get(module, set()))) or "no installed distribution"
        yield (
            f"{module} (imported by {places}; installed by {dists}) is neither installed by"
            " [project] dependencies + [test] nor an ignore_missing_imports override"
        )


def test_every_module_mypy_checks_imports_comes_with_the_test_extra_or_is_ignored() -> None:
    config = tomllib.loads(PYPROJECT.read_text())
    assert list(uncovered(config)) == []


def test_a_module_of_another_extra_alone_would_be_found() -> None:
    """The check sees what it must: drop matplotlib's override (it comes with [docs]
    alone) and the plot script's import of it is reported; install it with [test] and it
    is not."""
    config = tomllib.loads(PYPROJECT.read_text())
    overrides = config["tool"]["mypy"]["overrides"]
    without = [o for o in overrides if "matplotlib" not in str(o.get("module"))]
    assert len(without) < len(overrides)
    config["tool"]["mypy"]["overrides"] = without
    [problem] = list(uncovered(config))
    assert problem.startswith("matplotlib (imported by benchmarks/plot.py")
    config["project"]["optional-dependencies"]["test"].append("matplotlib>=3.8")
    assert list(uncovered(config)) == []
