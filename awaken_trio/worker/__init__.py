"""Durable serving, built on the kernel's API (typed against ``ServingHost`` and the
``Claims`` port, never the supervisor or its attempts): the claim book and its keeper
(claims and their leases), control relayed from other processes, and the serving loop that
claims queued and lost runs.

``awaken_trio._open`` composes these with the kernel and a store (`awaken_trio.open_runtime`,
`Runtime.serve`); this package has no public names of its own.
"""

__all__: list[str] = []
