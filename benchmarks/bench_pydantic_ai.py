"""What running a pydantic-ai agent as a durable awaken_trio run adds per model call, against
calling pydantic-ai on plain asyncio in the same process, and where it goes.

Run from the repository root (needs the ``pydantic-ai`` extra)::

    python benchmarks/bench_pydantic_ai.py            # three rounds, a minute or two
    python benchmarks/bench_pydantic_ai.py --runs 20  # fewer runs per round
    python benchmarks/bench_pydantic_ai.py --json out.json  # also write the figures

The agent is pydantic-ai's ``FunctionModel`` (no network), answering at once: each run makes
``--rounds-per-run`` tool calls, one per model request, then answers, so a run is
``rounds + 1`` model requests and ``rounds`` tool calls, ``2 * rounds + 1`` steps. Measured
in each round, the ways interleaved five runs at a time (so a machine that gets busier
slows all of them alike):

1. ``asyncio``: ``await agent.run(prompt)`` on plain asyncio (``asyncio.run``): the baseline;
2. ``asyncio+journal``: the same on plain asyncio with a pydantic-ai durability capability
   whose journal is a dict: what pydantic-ai's own durable machinery costs, for any engine;
3. ``agent_body``: ``runtime.execute(agent_body(agent))`` on the memory store: a durable run
   per agent run (one at a time, so each starts and stops the bridge's loop and thread),
   every model request and tool call a journaled step;
4. ``agent_body/sqlite``: 3 on SQLite (``synchronous=full``, the default): 3 plus the
   durable writes;
5. ``steps``, ``steps/sqlite``: a plain Trio body taking the same steps per run, with results
   the size of the agent's model responses: the steps alone, without the agent or the
   bridge (on SQLite, a group-committed write each);
6. ``bridge``: what 3 does per step apart from pydantic-ai and the step, alone: from
   asyncio, a ``RunContext.step`` through the bridge whose function runs a coroutine back on
   the loop (two round trips between the threads, four hand-overs) and commits its result.

1-5 report microseconds per model request (a run's time over its model requests), 6
microseconds per step; wall and CPU (every thread's), the medians of three rounds, and what
3 adds over 2 with the parts 5 and 6 explain. Target: the bridge (6) adds under 1 ms per
model call.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from typing import Any

import trio
from _harness import Timing, arguments, interleaved, medians, print_table, write_json
from pydantic_ai import Agent
from pydantic_ai.durable_exec import (
    BaseDurabilityCapability,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from awaken_trio import RunContext, open_runtime
from awaken_trio.integrations._asyncio_bridge import open_asyncio_bridge
from awaken_trio.integrations.pydantic_ai import _Durability, agent_body
from awaken_trio.store import MemoryStore


def make_agent(rounds: int) -> Agent[None, str]:
    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(
            isinstance(part, ToolReturnPart) for message in messages for part in message.parts
        )
        if done < rounds:
            call = ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"c{done}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"done after {done}")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="bench")

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        return a + b

    return agent


async def on_asyncio(agent: Agent[None, str], runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        await agent.run("go")
    return time.perf_counter() - start


class _DictBackend(JournalCallableOperationBackend[None]):
    """A journal in a dict: each unit's JSON payload kept by name and ordinal."""

    def __init__(self, agent_name: str, default_model_id: str | None) -> None:
        super().__init__(
            agent_name=agent_name,
            default_model_id=default_model_id,
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )
        self.journal: dict[tuple[str, int], object] = {}
        self.counts: dict[str, int] = {}

    async def execute(
        self, *, operation_id: Any, name: str, body: Any, cache_key: Any, config: None
    ) -> object:
        index = self.counts.get(name, 0)
        self.counts[name] = index + 1
        if (name, index) not in self.journal:
            self.journal[(name, index)] = await body()
        return self.journal[(name, index)]


class _DictDurability(BaseDurabilityCapability[Any]):
    # The same choices as agent_body's engine (JSON journal, tools one at a time).
    engine_spec = _Durability.engine_spec

    @property
    def in_durable_context(self) -> bool:
        return True

    def get_durable_operation_backend(self) -> _DictBackend:
        return _DictBackend(self.name, self.default_model_id)


async def on_asyncio_journal(agent: Agent[None, str], runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        await agent.run("go", capabilities=[_DictDurability()])
    return time.perf_counter() - start


def response_json(agent: Agent[None, str]) -> object:
    """A model response in its journaled JSON form, as large as the agent's."""
    messages = ModelMessagesTypeAdapter.dump_python(
        agent.run_sync("go").all_messages(), mode="json"
    )
    return messages[1]


async def bridge_steps(steps: int, result: object) -> float:
    """Seconds for ``steps`` steps taken from asyncio through the bridge, as agent_body's
    backend takes one per durable unit (its function runs a coroutine back on the loop)."""

    async def payload() -> object:
        return result

    async def unit(ctx: RunContext, bridge: Any) -> object:
        return await bridge.run(payload)

    async def body(ctx: RunContext) -> float:
        async with open_asyncio_bridge(ctx.run_id) as bridge:

            async def from_asyncio() -> float:
                start = time.perf_counter()
                for _ in range(steps):
                    await bridge.call(ctx.step, "bench.step", unit, ctx, bridge)
                return time.perf_counter() - start

            took: float = await bridge.run(from_asyncio)
            return took

    async with open_runtime(MemoryStore()) as runtime:
        await runtime.execute(body, run_id="bench")
        record = await runtime.record("bench")
        return float(record.result)


async def steps_alone(store: str, runs: int, steps: int, result: object) -> float:
    """Seconds for ``runs`` runs of a Trio body taking ``steps`` steps each, whose results
    are the size of a model response, on ``store``: the steps without the agent or the
    bridge (on SQLite, the durable write of each)."""

    async def payload() -> object:
        return result

    async def body(ctx: RunContext) -> None:
        for _ in range(steps):
            await ctx.step("bench.step", payload)

    async with open_runtime(store) as runtime:
        start = time.perf_counter()
        for _ in range(runs):
            await runtime.execute(body)
        return time.perf_counter() - start


async def as_runs(agent: Agent[None, str], runs: int, store: str) -> float:
    body = agent_body(agent)
    async with open_runtime(store, bodies={"bench": body}) as runtime:
        start = time.perf_counter()
        for _ in range(runs):
            await runtime.execute(body, input="go")
        return time.perf_counter() - start


def one_round(
    agent: Agent[None, str], runs: int, tool_calls: int, result: object, sqlite: str
) -> dict[str, Timing]:
    """Wall and CPU microseconds per model request each way (per step for the bridge),
    the ways interleaved five runs at a time."""
    requests = tool_calls + 1
    steps = tool_calls + requests  # a step per model request and per tool call
    chunk = 5
    ways: dict[str, Callable[[], object]] = {
        "asyncio": lambda: asyncio.run(on_asyncio(agent, chunk)),
        "asyncio+journal": lambda: asyncio.run(on_asyncio_journal(agent, chunk)),
        "agent_body": lambda: trio.run(as_runs, agent, chunk, "memory://"),
        "agent_body/sqlite": lambda: trio.run(as_runs, agent, chunk, sqlite),
        "steps": lambda: trio.run(steps_alone, "memory://", chunk, steps, result),
        "steps/sqlite": lambda: trio.run(steps_alone, sqlite, chunk, steps, result),
        "bridge": lambda: trio.run(bridge_steps, chunk * steps, result),
    }
    turns = max(1, runs // chunk)
    totals = interleaved(ways, turns)
    return {
        way: total.per(turns * chunk * (steps if way == "bridge" else requests))
        for way, total in totals.items()
    }


def main() -> None:
    parser = arguments(__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rounds-per-run", type=int, default=4)
    args = parser.parse_args()
    agent = make_agent(args.rounds_per_run)
    tool_calls = args.rounds_per_run
    result = response_json(agent)
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = f"sqlite:///{tmp}/bench.db"
        # Warm up: pydantic-ai builds its schemas on first use.
        one_round(agent, 5, tool_calls, result, sqlite)
        rounds = [
            one_round(agent, args.runs, tool_calls, result, sqlite) for _ in range(args.repeat)
        ]
    figures = medians(rounds)
    steps = (2 * tool_calls + 1) / (tool_calls + 1)
    print_table(
        f"{args.runs} runs of {tool_calls + 1} model requests and {tool_calls} tool calls"
        f" ({steps:.1f} steps per model request), medians of {args.repeat} rounds,"
        " us per model request (per step for the bridge):",
        figures,
    )
    for label in ("wall", "cpu"):
        values = {way: getattr(timing, label) for way, timing in figures.items()}
        added = values["agent_body"] - values["asyncio+journal"]
        bridge = values["bridge"] * steps
        store = values["agent_body/sqlite"] - values["agent_body"]
        print(
            f"  {label}: agent_body adds {added:.1f} over asyncio+journal per model request,"
            f" of which its steps alone (memory store) {values['steps']:.1f} and the bridge"
            f" {bridge:.1f}; on SQLite the steps cost {values['steps/sqlite']:.1f}"
            f" (agent_body on SQLite adds {store:.1f} to agent_body on memory)"
        )
    bridge_wall = figures["bridge"].wall
    met = "met" if bridge_wall < 1000 else "MISSED"
    print(f"target (the bridge adds < 1 ms per model call): {bridge_wall:.1f} us a step, {met}")
    write_json(args.json, {"us_per_model_request": figures, "bridge_target_met": met == "met"})


if __name__ == "__main__":
    main()
