"""Every code sample in the README and the documentation runs as written.

A page's samples run in order in a temporary directory of their own, so a later sample may
use what an earlier one wrote (``sqlite:///runs.db``, a module of bodies). How a sample runs
is said by its fence and, optionally, an HTML comment on the line before it:

- ```` ```python ````: run as a script by this interpreter in a process of its own (in the
  page's directory), and it must exit 0; its own ``assert`` lines are its checks.
- ``<!-- sample: file NAME -->`` before a block of any language: written to ``NAME`` in the
  page's directory (a module importable by later samples and by a worker, compiled; a
  project's ``pyproject.toml``).
- ``<!-- sample: pytest -->``: written to a test module and run by pytest in a process of
  its own, in the page's directory as in a user's project: with the configuration the page
  wrote there and no option of this suite's (the package's plugin gives it the ``explore``
  fixture); every test must pass.
- ``<!-- sample: worker MODULE:ATTR -->``: an ``awaken-trio worker MODULE:ATTR`` process
  serves ``sqlite:///runs.db`` in the page's directory while the sample runs, then is
  killed.
- ```` ```console ````: each ``$ `` line is run by bash in the page's directory and must
  exit 0; the lines written under it are what it printed (stdout and stderr as a terminal
  shows them, blank lines and spacing aside): ``...`` stands for any lines, and a fresh
  run id or a time for any other, the page's being an example.

Blocks of any other language (``sh``, ``text``, ``toml``) are shown, not run: they are the
commands that install things, serve until Ctrl-C, or need a PostgreSQL server or a model key.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import attrs
import pytest
import trio

from awaken_trio.testing import CancellationViolation, explore_cancellation

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
BIN = Path(sys.executable).parent
TIMEOUT = 120.0

_FENCE = re.compile(
    r"(?:^<!-- sample: (?P<marker>[^>]*?) -->\n)?^```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$",
    flags=re.DOTALL | re.MULTILINE,
)


@attrs.frozen
class Sample:
    """One fenced block of a page: where it starts, its language, its marker, its text."""

    page: Path
    line: int
    lang: str
    marker: str
    code: str

    @property
    def where(self) -> str:
        shown = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{shown}:{self.line}"


def samples(page: Path) -> list[Sample]:
    text = page.read_text()
    return [
        Sample(
            page,
            text.count("\n", 0, found.start("code")),
            found.group("lang"),
            (found.group("marker") or "").strip(),
            found.group("code"),
        )
        for found in _FENCE.finditer(text)
    ]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("AWAKEN_TRIO_STORE", None)
    env.pop("OPENAI_BASE_URL", None)
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "200"
    return env


@contextmanager
def _worker(target: str, where: Path) -> Iterator[None]:
    """An ``awaken-trio worker`` process serving the page's SQLite file until the block ends;
    killed (its whole process group) whatever the sample did."""
    process = subprocess.Popen(
        [
            *(str(BIN / "awaken-trio"), "worker", target),
            *("--store", "sqlite:///runs.db", "--poll", "0.02"),
        ],
        cwd=where,
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=TIMEOUT)
        assert process.returncode == -signal.SIGKILL, stderr.decode()


def _run_python(sample: Sample, where: Path, index: int) -> None:
    script = where / f"docs_sample_{index}.py"
    script.write_text(sample.code)
    finished = subprocess.run(
        [sys.executable, script.name],
        cwd=where,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert finished.returncode == 0, f"{sample.where}\n{finished.stdout}\n{finished.stderr}"


def _run_pytest(sample: Sample, where: Path, index: int) -> None:
    module = where / f"test_docs_sample_{index}.py"
    module.write_text(sample.code)
    finished = subprocess.run(
        # As a user's project runs it: its own configuration (pyproject.toml, written by
        # the page, or none), not this suite's options.
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("--rootdir", str(where), module.name),
        ],
        cwd=where,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert finished.returncode == 0, f"{sample.where}\n{finished.stdout}\n{finished.stderr}"
    assert re.search(r"\b\d+ passed\b", finished.stdout), finished.stdout


# What differs from one run of a command to the next: a fresh run id, a time (as text, or
# as a JSON number under a time's key). The page's values are examples of them.
_VARYING: Final = (
    (re.compile(r"\b[0-9a-f]{28}\b"), "<run id>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?"), "<time>"),
    (
        re.compile(r'"(at|created_at|updated_at|started_at|ended_at|deadline)": -?[\d.e+-]+'),
        r'"\1": <time>',
    ),
)
ELIDED: Final = "..."
"""A line of a console sample standing for any number of printed lines."""


def _normalised(line: str) -> str:
    for pattern, replacement in _VARYING:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


def _shows(shown: list[str], printed: list[str]) -> bool:
    """Whether the lines a page shows are the lines printed, ``...`` standing for any."""
    if not shown:
        return not printed
    if shown[0] == ELIDED:
        return any(_shows(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and shown[0] == printed[0] and _shows(shown[1:], printed[1:])


def _run_console(sample: Sample, where: Path) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in sample.code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif line.strip():
            assert commands, f"{sample.where}: output before any command"
            commands[-1][1].append(line)
    assert commands, f"{sample.where}: a console block with no command"
    for command, expected in commands:
        # Both streams in one, in the order they were written, as a terminal shows them.
        finished = subprocess.run(
            ["bash", "-c", command],
            cwd=where,
            env=_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT,
        )
        printed = finished.stdout
        assert finished.returncode == 0, f"{sample.where}: {command}\n{printed}"
        shown = [_normalised(line) for line in expected]
        got = [_normalised(line) for line in printed.splitlines() if line.strip()]
        assert _shows(shown, got), (
            f"{sample.where}: {command} printed:\n{printed}\nthe page shows:\n"
            + "\n".join(expected)
        )


def run_page(page: Path, where: Path) -> int:
    """Run every runnable sample of ``page`` in order in ``where``; how many ran."""
    ran = 0
    for index, sample in enumerate(samples(page)):
        kind, _, argument = sample.marker.partition(" ")
        if kind == "file":
            (where / argument).write_text(sample.code)
            if sample.lang == "python":
                compile(sample.code, sample.where, "exec")
        elif sample.lang == "console":
            _run_console(sample, where)
        elif sample.lang != "python":
            assert not sample.marker, f"{sample.where}: a marker on a block that never runs"
            continue
        elif kind == "pytest":
            _run_pytest(sample, where, index)
        elif kind == "worker":
            with _worker(argument, where):
                _run_python(sample, where, index)
        else:
            assert not sample.marker, f"{sample.where}: unknown marker {sample.marker!r}"
            _run_python(sample, where, index)
        ran += 1
    return ran


# Pages whose samples start processes (the command line, pytest) take longer than ~5 s.
SLOW_PAGES = {"docs/guides/operating.md", "docs/guides/testing.md"}


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(
            page,
            id=(name := page.relative_to(ROOT).as_posix()),
            marks=[pytest.mark.slow] if name in SLOW_PAGES else [],
        )
        for page in PAGES
    ],
)
def test_every_sample_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


def test_the_pages_have_samples_and_every_python_sample_is_run() -> None:
    found = {page: samples(page) for page in PAGES}
    assert (DOCS / "index.md") in found
    python = [s for page in found.values() for s in page if s.lang == "python"]
    assert len(python) >= 15, "fewer python samples than the guides have"
    for sample in python:
        kind = sample.marker.partition(" ")[0]
        assert kind in ("", "file", "pytest", "worker"), sample.where
    console = [s for page in found.values() for s in page if s.lang == "console"]
    assert console, "no command-line sample runs"


def test_an_unfenced_python_block_would_be_found() -> None:
    """The fence pattern finds a block with a marker and one without, and nothing else."""
    text = "x\n<!-- sample: file m.py -->\n```python\na = 1\n```\n\n```sh\nls\n```\n"
    found = list(_FENCE.finditer(text))
    assert [(f.group("lang"), f.group("marker"), f.group("code")) for f in found] == [
        ("python", "file m.py", "a = 1\n"),
        ("sh", None, "ls\n"),
    ]


def _testing_guide_explore_sample() -> Sample:
    [sample] = [
        s
        for s in samples(DOCS / "guides" / "testing.md")
        if "async def test_transfer_is_cancellation_safe" in s.code
    ]
    return sample


def _explore_test(code: str) -> object:
    namespace: dict[str, object] = {"__name__": "docs_explore_sample"}
    exec(compile(code, "docs/guides/testing.md", "exec"), namespace)
    return namespace["test_transfer_is_cancellation_safe"]


def test_the_cancellation_safety_sample_passes_its_exploration() -> None:
    test = _explore_test(_testing_guide_explore_sample().code)
    assert callable(test)
    trio.run(test, explore_cancellation)


def test_the_cancellation_safety_sample_finds_the_lock_left_held() -> None:
    code = _testing_guide_explore_sample().code
    # The same body with its lock released only on the normal path.
    broken = code.replace("    try:\n", "    if True:\n").replace(
        "    finally:\n", "    if True:\n"
    )
    assert broken != code
    test = _explore_test(broken)
    assert callable(test)
    with pytest.raises(CancellationViolation, match="the lock is still held"):
        trio.run(test, explore_cancellation)


def console_sample(tmp_path: Path, text: str) -> Sample:
    page = tmp_path / "page.md"
    page.write_text(f"```console\n{text}```\n")
    [sample] = samples(page)
    return sample


def test_a_failing_console_sample_is_reported(tmp_path: Path) -> None:
    """The console runner fails a command that exits non-zero, output that is missing,
    and output the page does not show: what it shows is what the command prints."""
    with pytest.raises(AssertionError, match="false"):
        _run_console(console_sample(tmp_path, "$ false\n"), tmp_path)
    with pytest.raises(AssertionError, match="the page shows"):
        _run_console(console_sample(tmp_path, "$ echo one\ntwo\n"), tmp_path)
    with pytest.raises(AssertionError, match="the page shows"):
        _run_console(console_sample(tmp_path, "$ echo one; echo two\none\n"), tmp_path)
    with pytest.raises(AssertionError, match="the page shows"):  # a command printing nothing
        _run_console(console_sample(tmp_path, "$ true\nsomething\n"), tmp_path)
    with pytest.raises(AssertionError, match="the page shows"):  # output shown as nothing
        _run_console(console_sample(tmp_path, "$ echo one\n"), tmp_path)


def test_a_console_sample_may_elide_lines_and_shows_ids_and_times_as_any(tmp_path: Path) -> None:
    """``...`` stands for any lines; a fresh run id and a time match any other (the page's
    are an example of what a run prints); spacing is not compared (tables)."""
    printed = (
        "echo 01a24234a364040aff2f37b57cf2; echo first; echo middle; echo more;"
        " echo 'last  one'; echo 'at 2025-06-01 12:00:03.118'; echo '{\"at\": 1717243203.5}'"
    )
    shown = (
        f"$ {printed}\n0123456789abcdef0123456789ab\nfirst\n...\nlast one\n"
        'at 2031-01-01 00:00:00.000\n{"at": 1.0}\n'
    )
    _run_console(console_sample(tmp_path, shown), tmp_path)
    with pytest.raises(AssertionError, match="the page shows"):  # a name is not an id
        _run_console(
            console_sample(tmp_path, "$ echo doc-7\n01a24234a364040aff2f37b57cf2\n"), tmp_path
        )


def test_a_failing_python_sample_is_reported(tmp_path: Path) -> None:
    """A python sample whose own check fails fails the page, naming where it is."""
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nassert 1 + 1 == 3, 'arithmetic'\n```\n")
    [failing] = samples(page)
    with pytest.raises(AssertionError, match=r"README.md:3(.|\n)*arithmetic"):
        _run_python(attrs.evolve(failing, page=ROOT / "README.md"), tmp_path, 0)


TRIO_TEST = "import trio\n\n\nasync def test_sleeps() -> None:\n    await trio.sleep(0)\n"


@pytest.mark.slow  # two pytest processes
def test_a_pytest_sample_runs_as_a_users_project_runs_it(tmp_path: Path) -> None:
    """No option a user's project would not have: an async test without the project's
    own ``trio_mode = true`` fails, as it would for them; with it written by the page (a
    ``file`` sample of any language), it passes."""
    page = tmp_path / "page.md"
    bare = f"<!-- sample: pytest -->\n```python\n{TRIO_TEST}```\n"
    page.write_text(bare)
    alone = tmp_path / "alone"
    alone.mkdir()
    with pytest.raises(AssertionError):
        run_page(page, alone)
    config = "[tool.pytest.ini_options]\ntrio_mode = true\n"
    page.write_text(f"<!-- sample: file pyproject.toml -->\n```toml\n{config}```\n\n{bare}")
    configured = tmp_path / "configured"
    configured.mkdir()
    assert run_page(page, configured) == 2
    assert (configured / "pyproject.toml").read_text() == config


def test_the_testing_guide_sets_trio_mode_before_its_first_pytest_sample() -> None:
    found = samples(DOCS / "guides" / "testing.md")
    first_pytest = next(i for i, s in enumerate(found) if s.marker == "pytest")
    configs = [s for s in found[:first_pytest] if s.marker == "file pyproject.toml"]
    assert configs, "the first pytest sample comes before the project's configuration"
    assert "trio_mode = true" in configs[0].code
