"""A serving process's heap, settled once it has started (``awaken-trio worker``)."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect garbage once, then move every object alive into the permanent generation
    (`gc.freeze`); the number of objects it holds. Called once, when a worker process has
    started: its modules, bodies, pools and runtime, alive for the rest of the process.

    Why: CPython's full collections walk every object they track, and in a serving
    process most of those are the startup's, which never become garbage; the runs, their
    attempts and their records come and go meanwhile, so full collections come often. Left
    out of them, the startup heap costs nothing more: a worker draining no-op runs on
    PostgreSQL spent 12% less CPU a run (``docs/guides/scaling-postgres.md``). What is made
    afterwards is collected as before; what was frozen never is, so this runs once, after
    startup, and not in a library that shares its process with an application.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
