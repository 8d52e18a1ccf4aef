"""The documentation site builds without a warning, and the benchmark plots are drawn by
their script from the figures the benchmarks page shows."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLOT = ROOT / "benchmarks" / "plot.py"
FIGURES = ROOT / "benchmarks" / "figures.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _needs(module: str, extra: str) -> None:
    """Skip when ``module`` is missing, except under CI, where it is a failure: `.ci/run`
    installs the ``[docs]`` extra."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed; CI installs it with the {extra} extra")
        pytest.skip(f"{module} is not installed: pip install -e '.[{extra}]'")


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    _needs("mkdocs", "docs")
    _needs("mkdocstrings_handlers.python", "docs")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for page in ["index.html", "concepts/index.html", "guides/cancellation/index.html"]:
        assert (tmp_path / page).is_file(), page
    reference = (tmp_path / "reference" / "runtime" / "index.html").read_text()
    # The API reference is generated from the docstrings.
    assert "open_runtime" in reference
    assert "Open a runtime: a supervisor, a store and a nursery" in reference


def test_the_plot_script_draws_every_figure(tmp_path: Path) -> None:
    _needs("matplotlib", "docs")
    plotted = subprocess.run(
        [sys.executable, str(PLOT), "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plotted.returncode == 0, plotted.stderr
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["bench-cancel.png", "bench-throughput.png", "bench-workers.png"]
    for name in names:
        drawn = (tmp_path / name).read_bytes()
        committed = (ROOT / "docs" / "images" / name).read_bytes()
        assert drawn.startswith(PNG_SIGNATURE)
        # The committed image is one the script drew (its size is the script's; its pixels
        # depend on matplotlib's version and fonts, so they are not compared).
        assert _size(committed) == _size(drawn), f"{name}: run python benchmarks/plot.py"


def _size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, which always comes first."""
    assert png.startswith(PNG_SIGNATURE)
    assert png[12:16] == b"IHDR"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def _numbers(value: object) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return []


def test_every_plotted_figure_is_in_the_benchmarks_page() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    figures = json.loads(FIGURES.read_text())
    shown = page.replace(",", "")
    numbers = [n for n in _numbers(figures) if n not in (1, 2)]  # worker counts
    assert len(numbers) > 10
    missing = []
    for number in numbers:
        # A figure in runs/s may be shown rounded to thousands ("12.9k").
        thousands = f"{number / 1000:.1f}k"
        if str(number) not in shown and thousands not in shown:
            missing.append(number)
    assert missing == [], f"figures.json has figures the page does not show: {missing}"
