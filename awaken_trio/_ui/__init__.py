"""The dashboard (``awaken-trio ui``, DESIGN §3.6): a Starlette app over a runtime on a
store, served by hypercorn's Trio worker in the runtime's own nursery.

Built on the public API and on the faces' shared package (`awaken_trio._face`: the shapes,
the failures, the controls table), as the command line is, so the page, its JSON API and
``awaken-trio runs ...`` answer alike; it imports nothing of the command line. Importing
it needs the ``ui`` extra (starlette, hypercorn).
"""

from ._app import dashboard_app as dashboard_app
from ._guard import is_loopback as is_loopback
from ._hub import EventHub as EventHub
from ._serve import serve_dashboard as serve_dashboard

__all__ = ["EventHub", "dashboard_app", "is_loopback", "serve_dashboard"]
