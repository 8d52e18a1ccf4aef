"""Durable serving, built on the kernel's API: claims and their leases, control relayed from
other processes, the serving loop that claims queued and lost runs, and scheduled resumes.

The runtime starts these services itself (`awaken_trio.open_runtime`, `Runtime.serve`); this
package has no public names of its own.
"""

__all__: list[str] = []
