"""Agent frameworks as durable awaken_trio runs, each in a module of its own whose framework
is an extra: `awaken_trio.integrations.pydantic_ai` (``pip install -e '.[pydantic-ai]'``).
They are built on the public API alone (`RunContext.step`, `awaken_trio.current_context`,
tickets), as any integration of your own can be."""
