"""Agent runs: a model-and-tools loop as a run body.

`Agent` is a run body (pass it to ``runtime.start``, ``ctx.run_child``, or register it by
name). Each step is one inference plus the tool calls it asked for, run concurrently
inside the attempt, then a boundary that commits the transcript (OpenAI chat shape) as the
run's checkpoint. Cancelling, pausing, resuming, tool permissions, client-executed tools
and delegation to sub-agents all go through the runtime's committed paths.

The `Model` port has two adapters here: `ScriptedModel` (a script, for tests and demos)
and `OpenAIChatModel` (any OpenAI-compatible endpoint; needs the ``[openai]`` extra:
``pip install -e '.[openai]'`` from a checkout). A model that streams sends the text it
reads to the run's ``"agent.tokens"`` stream (`send_token`; ``OpenAIChatModel(stream=True)``).
This package is built on the public ``awaken_trio`` API only.
"""

from ._agent import Agent as Agent
from ._model import Model as Model
from ._model import ModelError as ModelError
from ._model import ModelReply as ModelReply
from ._model import ToolCall as ToolCall
from ._openai import OpenAIChatModel as OpenAIChatModel
from ._scripted import ScriptedModel as ScriptedModel
from ._tokens import send_token as send_token
from ._tools import SubAgentTool as SubAgentTool
from ._tools import Tool as Tool

__all__ = [
    "Agent",
    "Model",
    "ModelError",
    "ModelReply",
    "OpenAIChatModel",
    "ScriptedModel",
    "SubAgentTool",
    "Tool",
    "ToolCall",
    "send_token",
]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
