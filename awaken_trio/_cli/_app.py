"""The ``awaken-trio`` command group and its top-level handler.

`main` is the one place an exit code is decided for what the commands did not report
themselves: a usage error exits 2, an interrupt 130, anything unforeseen 70; none of them
prints a traceback, and nothing printed carries a password.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import click
from click.exceptions import NoArgsIsHelpError

from .._face.failures import CommandFailed, Exit, one_line
from ._common import report
from ._demo import run_demo
from ._logging import say
from ._runs import json_option, runs, store_option
from ._ui import ui
from ._worker import worker
from ._workers import workers


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="awaken-trio", prog_name="awaken-trio")
def cli() -> None:
    """Run, watch and steer awaken_trio runs from the command line.

    Every command takes --store URL (default $AWAKEN_TRIO_STORE); reads accept --json.
    Exit codes: 0 done; 1 refused by the run's committed state; 2 usage errors and bad
    input; 3 the store cannot be opened or read; 130 interrupted.
    """


@cli.command("demo")
@store_option
@json_option
def demo(store: str | None, as_json: bool) -> None:
    """Plain and agent runs under a live table, every control path exercised, then the
    final committed state of each (on a new SQLite file unless --store is given)."""
    run_demo(store, as_json)


cli.add_command(worker)
cli.add_command(runs)
cli.add_command(ui)
cli.add_command(workers)


def usage_failure(exc: click.UsageError) -> CommandFailed:
    """A usage error (an unknown option, a bad value, a missing argument) as a failure to
    report: its message and where its command's help is."""
    error = "bad_input" if isinstance(exc, click.BadParameter) else "usage_error"
    where = "awaken-trio" if exc.ctx is None else exc.ctx.command_path
    return CommandFailed(
        Exit.BAD_INPUT, error, one_line(f"{exc.format_message()} (see {where} --help)")
    )


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``awaken-trio`` entry point (also ``python -m awaken_trio``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="awaken-trio", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()  # a group given no command: its help
        sys.exit(Exit.BAD_INPUT)
    except click.UsageError as exc:
        # One line, as every other failure (``--json``: the error object on stdout).
        report(usage_failure(exc), as_json="--json" in args)
        sys.exit(Exit.BAD_INPUT)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        say("awaken-trio: interrupted")
        sys.exit(Exit.INTERRUPTED)
    except Exception as exc:
        say(f"awaken-trio: internal error: {type(exc).__name__}: {one_line(str(exc))}")
        sys.exit(Exit.INTERNAL)
    sys.exit(code if isinstance(code, int) else Exit.DONE)
