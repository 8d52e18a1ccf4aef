"""The project's own bodies, explored: examples/demo.py's runs and examples/agent.py's agents
(on scripted models), cancelled, stopped and paused at every schedule point."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from awaken_trio import EndCause, RunState
from awaken_trio.agent import Agent, ModelReply, ScriptedModel, SubAgentTool, ToolCall
from awaken_trio.testing import Command, explore_cancellation, fresh

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
ALL: tuple[Command, ...] = ("cancel", "stop", "pause")
CANCELLED = RunState.Ended(EndCause.Cancelled())


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


demo = _example("demo")
agent_example = _example("agent")


@pytest.mark.parametrize("name", ["count_to_ten", "hang", "parent", "flaky", "nap"])
async def test_the_demo_bodies_hold_at_every_point(name: str) -> None:
    report = await explore_cancellation(getattr(demo, name), commands=ALL)
    assert not report.stopped_early
    assert len(report.points) == report.schedule_points * len(ALL)
    assert CANCELLED in {p.outcome for p in report.points}


def _lead() -> Agent:
    researcher = Agent(
        ScriptedModel([ModelReply(text="Trio is a structured-concurrency library.")]),
        system="You answer research questions in one sentence.",
    )
    return Agent(
        ScriptedModel(
            [
                ModelReply(tool_calls=(ToolCall("c1", "researcher", {"prompt": "What?"}),)),
                ModelReply(text="Per my researcher: a structured-concurrency library."),
            ]
        ),
        [SubAgentTool("researcher", researcher)],
        system="Delegate research questions to the researcher tool.",
    )


def _tidy() -> Agent:
    return Agent(
        ScriptedModel(
            [
                ModelReply(tool_calls=(ToolCall("c1", "list_files", {}),)),
                ModelReply(text="Nothing to delete."),
            ]
        ),
        agent_example.FILE_TOOLS[:1],
    )


@pytest.mark.parametrize("make", [_lead, _tidy], ids=["delegating_agent", "tool_agent"])
async def test_the_example_agents_hold_at_every_point(make: object) -> None:
    assert callable(make)
    report = await explore_cancellation(fresh(make), input="Tidy up.", commands=ALL)
    assert report.baseline == RunState.Ended(EndCause.NaturalEnd())
    assert CANCELLED in {p.outcome for p in report.points}
