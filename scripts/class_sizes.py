"""Classes longer than a limit (600 lines by default) in the package, or in the files and
folders given: each one's file, line, name and length, longest first. Exits 1 if it found
any, so a check can run it.

    .venv/bin/python scripts/class_sizes.py [--limit 600] [PATH ...]

A class's length is the lines from its ``class`` statement to its last line (its
decorators aside), as ``ast`` reads them; nested classes count in their own right too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 600


class Found(NamedTuple):
    path: Path
    line: int
    name: str
    lines: int


def class_sizes(paths: Iterable[Path]) -> list[Found]:
    """Every class in the Python files under ``paths``, longest first."""
    found: list[Found] = []
    for path in paths:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    length = node.end_lineno - node.lineno + 1
                    found.append(Found(file, node.lineno, node.name, length))
    return sorted(found, key=lambda f: (-f.lines, str(f.path), f.line))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=LIMIT, help="the most lines a class may have")
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "awaken_trio"])
    args = parser.parse_args(argv)
    over = [f for f in class_sizes(args.paths) if f.lines > args.limit]
    for f in over:
        print(f"{f.path}:{f.line}: class {f.name} is {f.lines} lines (limit {args.limit})")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
