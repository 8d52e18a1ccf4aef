"""examples/agent.py runs as a script and prints the committed trail it promises."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import trio

from tests.agent.fake_openai import FakeOpenAI, Stream, chunk, text_stream

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent.py"


def tool_call_stream(call_id: str, name: str, arguments: str) -> Stream:
    call = {"index": 0, "id": call_id, "function": {"name": name, "arguments": arguments}}
    return Stream([chunk(tool_calls=[call]), chunk(finish="tool_calls")])


async def test_the_agent_example_runs_on_scripted_models_and_prints_committed_states() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's package, whatever is installed
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-W", "error", str(EXAMPLE)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=ROOT,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0] == "model: scripted"
    # 1. approval: the run waits for a person, then ends with the tool's work done.
    assert any(line.startswith("committed: Awaiting(tool_permission)") for line in lines)
    assert "approving delete_file({'path': 'draft.txt'})" in lines
    assert "result: {'text': 'Deleted draft.txt.', 'steps': 3}" in lines
    assert "files left: ['notes.txt']" in lines
    # 2. delegation: the child's final text is the lead's tool result.
    assert (
        "the sub-agent's answer, as the lead saw it:"
        " Trio is a structured-concurrency library for Python." in lines
    )
    # 3. cancel: committed Cancelled, nothing of the interrupted step committed.
    assert "committed: RunState.Ended(cause=EndCause.Cancelled())" in lines
    assert (
        "event agent.interrupted: {'step': 1, 'phase': 'inference', 'tool_call_ids': []}" in lines
    )
    # 4. pause and resume: the queued message reaches the resumed run.
    assert any(line.startswith("committed: Awaiting(manual_pause)") for line in lines)
    assert "steps committed before the pause: 1" in lines
    assert (
        "user messages in the committed transcript:"
        " ['What files are there?', 'Answer in one line, please.']" in lines
    )
    assert lines.count("committed: RunState.Ended(cause=EndCause.NaturalEnd())") == 3


async def test_the_agent_example_runs_against_a_fast_endpoint_without_racing_its_runs(
    nursery: trio.Nursery,
) -> None:
    server = FakeOpenAI()
    await nursery.start(server.serve)
    server.script(
        # 1. approval
        tool_call_stream("call_1", "delete_file", '{"path": "draft.txt"}'),
        text_stream("Deleted draft.txt."),
        # 2. delegation: the lead, its sub-agent, the lead again
        tool_call_stream("call_2", "researcher", '{"prompt": "What is Trio?"}'),
        text_stream("Trio is a structured-concurrency library for Python."),
        text_stream("Per my researcher: Trio is a structured-concurrency library."),
        # 3. and 4.: answers at once, whichever run asks (the cancel may come first)
        text_stream("A short essay."),
        text_stream("There are files."),
        text_stream("One file: notes.txt."),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONPATH"] = str(ROOT)
    env["OPENAI_BASE_URL"] = server.base_url
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-W", "error", str(EXAMPLE)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=ROOT,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode() + out
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0] == "model: OpenAI-compatible endpoint"
    assert "approving delete_file({'path': 'draft.txt'})" in lines
    assert "files left: ['notes.txt']" in lines
    assert (
        "the sub-agent's answer, as the lead saw it:"
        " Trio is a structured-concurrency library for Python." in lines
    )
    # 3. the cancel or the endpoint's answer came first; either way one committed end.
    cancel = lines[lines.index("3. a live cancel while the model is still thinking") + 1 :]
    assert cancel[0] in (
        "committed: RunState.Ended(cause=EndCause.Cancelled())",
        "committed: RunState.Ended(cause=EndCause.NaturalEnd())",
    )
    # 4. the pause waits for the first step's boundary; the message reaches the resumed run.
    assert any(line.startswith("committed: Awaiting(manual_pause)") for line in lines)
    assert (
        "user messages in the committed transcript:"
        " ['What files are there?', 'Answer in one line, please.']" in lines
    )
    assert all(request.body["model"] == "gpt-4o-mini" for request in server.requests)


def test_the_agent_guides_first_example_runs_and_its_assertions_hold() -> None:
    guide = ROOT / "docs" / "guides" / "agents.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.DOTALL)
    block = blocks[0]
    assert "from awaken_trio.agent import" in block
    assert "trio.run(main)" in block
    namespace: dict[str, object] = {"__name__": "agent_guide_example"}
    exec(compile(block, str(guide), "exec"), namespace)
