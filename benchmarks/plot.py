"""Draw the benchmark figures of the documentation from ``benchmarks/figures.json``.

Run it with ``python benchmarks/plot.py`` (needs the ``[docs]`` extra, for matplotlib); it
writes ``docs/images/bench-throughput.png``, ``bench-workers.png`` and ``bench-cancel.png``
(``--out DIR`` writes them elsewhere). ``figures.json`` holds the figures the benchmark
scripts printed on the machine it names, the same ones the benchmarks page's tables show;
after a new measurement, update it and run this again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or used

import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "figures.json"
OUT = HERE.parent / "docs" / "images"
OURS = "#3f51b5"
THEIRS = "#b0b0b0"
# No timestamp or software version in the files, so drawing the same figures twice gives
# the same bytes and a re-run changes nothing in the checkout.
METADATA = {"Software": None}


def throughput(figures: dict[str, Any], out: Path) -> Path:
    data = figures["throughput"]
    bars = data["bars"]
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    xs = range(len(bars))
    width = 0.38
    ours = ax.bar(
        [x - width / 2 for x in xs],
        [b["awaken_trio"] for b in bars],
        width,
        color=OURS,
        label="awaken_trio",
    )
    theirs = ax.bar([x + width / 2 for x in xs], [b["baseline"] for b in bars], width, color=THEIRS)
    for rect, bar in zip(theirs, bars, strict=True):
        ax.annotate(
            bar["baseline_label"],
            (rect.get_x() + rect.get_width() / 2, rect.get_height()),
            ha="center",
            va="bottom",
            fontsize=7,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.bar_label(ours, fmt="{:,.0f}", fontsize=7, padding=2)
    ax.set_xticks(list(xs), [b["label"] for b in bars], fontsize=8)
    ax.set_ylabel(data["unit"])
    ax.set_title(f"{data['title']} ({figures['machine']})", fontsize=10)
    ax.legend(handles=[ours], loc="upper right", fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, out / "bench-throughput.png")


def workers(figures: dict[str, Any], out: Path) -> Path:
    data = figures["workers"]
    points = data["points"]
    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=110)
    labels = [f"{p['workers']} worker{'s' if p['workers'] > 1 else ''}" for p in points]
    bars = ax.bar(labels, [p["runs_per_second"] for p in points], color=OURS, width=0.5)
    ax.bar_label(bars, fmt="{:,.0f}", fontsize=8, padding=2)
    ax.set_ylabel(data["unit"])
    ax.set_title(data["title"], fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, out / "bench-workers.png")


def cancel(figures: dict[str, Any], out: Path) -> Path:
    rows = figures["cancel_latency"]["rows"]
    fig, axes = plt.subplots(1, len(rows), figsize=(9, 3.4), dpi=110)
    for ax, row in zip(axes, rows, strict=True):
        labels, p50, p99 = ["awaken_trio"], [row["p50"]], [row["p99"]]
        if "baseline_p50" in row:
            labels.append("bare Trio")
            p50.append(row["baseline_p50"])
            p99.append(row["baseline_p99"])
        xs = range(len(labels))
        a = ax.bar([x - 0.2 for x in xs], p50, 0.4, color=OURS, label="p50")
        b = ax.bar([x + 0.2 for x in xs], p99, 0.4, color=THEIRS, label="p99")
        ax.bar_label(a, fontsize=7, padding=2)
        ax.bar_label(b, fontsize=7, padding=2)
        ax.set_xticks(list(xs), labels, fontsize=8)
        ax.set_xlim(-0.8, 1.8)  # the same bar width in every panel, one bar pair or two
        ax.set_ylabel(row["unit"])
        ax.set_title(row["label"], fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].legend(fontsize=8)
    fig.suptitle(figures["cancel_latency"]["title"], fontsize=10)
    return _save(fig, out / "bench-cancel.png")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, metadata=METADATA)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    figures = json.loads(args.figures.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    written = [throughput(figures, args.out), workers(figures, args.out), cancel(figures, args.out)]
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()
