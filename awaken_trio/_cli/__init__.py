"""The ``awaken-trio`` command (DESIGN §3.3): ``demo``, ``worker``, ``runs ...`` and ``ui``.

Built on the public API only (`awaken_trio`, `awaken_trio.store`, `awaken_trio.agent`),
with click for its arguments and rich for its tables and live display.
"""

from ._app import cli as cli
from ._app import main as main

__all__ = ["cli", "main"]
