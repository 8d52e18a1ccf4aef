"""What tracing costs per run: trivial runs per second with and without a tracer provider.

Run from the repository root (needs the ``[otel]`` extra and, for the SDK rows,
``opentelemetry-sdk``, which the ``test`` extra installs)::

    python benchmarks/bench_tracing.py           # 20k runs, 5 repetitions: about 30 seconds
    python benchmarks/bench_tracing.py --quick   # 2k runs, 3 repetitions

Each row runs N trivial runs (``async def body(ctx): return 1``) on the default memory
store, ``await rt.start(body)`` N times and then ``await handle.wait()`` on every handle,
each repetition in its own ``trio.run`` after a ``gc.collect()``; the best repetition is
kept. Rows:

- off: ``open_runtime()``, no provider (the kernel's observer hook is one ``is None`` test).
- api no-op: the OpenTelemetry API's ``NoOpTracerProvider``: our span bookkeeping with
  spans that record nothing.
- sdk, no processor: the SDK's ``TracerProvider`` with no span processor: real spans made,
  attributes set and ended, exported nowhere.
- sdk, in-memory: the SDK with a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter``
  (cleared between repetitions): every span exported, in the run's own task.

Ratio = the row's runs per second / off's (1.0: free; 0.5: half the throughput). Exporting
for real (a ``BatchSpanProcessor`` to a collector) costs the in-memory row's work plus the
exporter's, in its own thread.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
from collections.abc import Callable

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import trio
from opentelemetry.trace import NoOpTracerProvider, TracerProvider

from awaken_trio import RunContext, open_runtime


async def trivial_body(ctx: RunContext) -> int:
    return 1


async def runs_per_second(n: int, provider: TracerProvider | None) -> float:
    async with open_runtime(tracer_provider=provider) as rt:
        started = time.perf_counter()
        handles = [await rt.start(trivial_body) for _ in range(n)]
        for handle in handles:
            await handle.wait()
        elapsed = time.perf_counter() - started
    return n / elapsed


def best_rate(n: int, repeats: int, make: Callable[[], TracerProvider | None]) -> float:
    best = 0.0
    for _ in range(repeats):
        provider = make()
        gc.collect()
        best = max(best, trio.run(runs_per_second, n, provider))
        shutdown = getattr(provider, "shutdown", None)
        if shutdown is not None:
            shutdown()
    return best


def sdk_rows() -> list[tuple[str, Callable[[], TracerProvider | None]]]:
    try:
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError:
        print("opentelemetry-sdk is not installed: the SDK rows are left out")
        return []

    def in_memory() -> TracerProvider:
        provider = SdkProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        return provider

    return [("sdk, no processor", SdkProvider), ("sdk, in-memory", in_memory)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2k runs, 3 repetitions")
    args = parser.parse_args()
    n, repeats = (2_000, 3) if args.quick else (20_000, 5)
    rows: list[tuple[str, Callable[[], TracerProvider | None]]] = [
        ("off", lambda: None),
        ("api no-op", NoOpTracerProvider),
        *sdk_rows(),
    ]
    print(f"trivial runs, start -> Ended, N={n}, best of {repeats}")
    print(f"{'tracing':<20} {'runs/s':>10} {'us/run':>8} {'ratio':>6}")
    baseline = math.nan
    for label, make in rows:
        rate = best_rate(n, repeats, make)
        if label == "off":
            baseline = rate
        print(f"{label:<20} {rate:>10,.0f} {1e6 / rate:>8.1f} {rate / baseline:>6.2f}")


if __name__ == "__main__":
    main()
