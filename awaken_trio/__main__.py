"""``python -m awaken_trio``: the ``awaken-trio`` command."""

from ._cli import main

if __name__ == "__main__":
    main()
