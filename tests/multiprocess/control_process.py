"""A one-shot control process for the multi-process tests: it opens a runtime on a store URL
(no bodies: it runs nothing), does one thing to a run, prints what it saw, and exits.

    python control_process.py <store-url> follow <run_id>     # each event, as JSON, to the end
    python control_process.py <store-url> resume <run_id>     # prints the handle's generation
    python control_process.py <store-url> send <run_id> <message>

``follow`` prints one JSON object per committed event of the run (``seq``, ``kind``,
``generation``, ``state`` as its repr), following commits made by any process, and returns
after the run's terminal event. Every line is flushed.
"""

from __future__ import annotations

import argparse
import json

import trio

from awaken_trio import LiveCommand, open_runtime


async def main(args: argparse.Namespace) -> None:
    async with open_runtime(args.store, lease=1.0, poll=0.02) as runtime:
        if args.action == "follow":
            async for event in runtime.events(args.run_id, follow=True):
                line = {
                    "seq": event.seq,
                    "kind": event.kind,
                    "generation": event.generation,
                    "state": repr(event.state),
                }
                print(json.dumps(line), flush=True)
        elif args.action == "resume":
            handle = await runtime.resume(args.run_id)
            print(f"resumed {handle.run_id} {handle.generation}", flush=True)
        else:
            await runtime.send(LiveCommand.Message(args.run_id, args.message))
            print(f"sent {args.run_id} {args.message}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("action", choices=("follow", "resume", "send"))
    parser.add_argument("run_id")
    parser.add_argument("message", nargs="?")
    trio.run(main, parser.parse_args())
