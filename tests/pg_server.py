"""A throwaway PostgreSQL server for tests and benchmarks.

`start_server()` runs the system's PostgreSQL (``initdb`` and ``pg_ctl`` on PATH or under
``/usr/lib/postgresql/*/bin``) in a temporary directory, on a free port of 127.0.0.1, with the
server's defaults (fsync on). PostgreSQL refuses to run as root, so when this process is root
the server runs as the unprivileged user `SERVER_USER` (created if missing) through
``runuser``. Each caller gets databases of its own from `PgServer.create_database()`.

The server is always stopped by `PgServer.stop()` (or leaving ``with start_server() as s:``);
its directory is then removed.

Usable without pytest::

    with start_server() as server:
        url = server.create_database()
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import final

SERVER_USER = "awaken_pg"
"""The operating-system user the server runs as when this process is root."""
SUPERUSER = "awaken"
"""The server's superuser role, which every database URL names."""
INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
    "/usr/lib/postgresql/*/bin; install them (Debian/Ubuntu: apt-get install postgresql-15) "
    "to run the PostgreSQL tests"
)
START_TIMEOUT = 60.0


class ServerUnavailable(RuntimeError):
    """The binaries a server needs are missing (the message says what to install)."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, else the newest
    ``/usr/lib/postgresql/<version>/bin``; None when there is none."""
    on_path = shutil.which("initdb")
    if on_path is not None and shutil.which("pg_ctl") is not None:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        pass
    # Two sessions may create the user at once: whichever loses sees it exist afterwards.
    subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            SERVER_USER,
        ],
        check=False,
        capture_output=True,
    )
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise ServerUnavailable(
            f"running as root, and the unprivileged user {SERVER_USER!r} the server must run "
            "as could not be created (useradd failed)"
        ) from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@final
class PgServer:
    """One running throwaway server. `url()` names a database on it (with the password)."""

    def __init__(
        self,
        *,
        bindir: Path,
        root: Path,
        port: int,
        password: str,
        preload: str = "",
        postgres: Path | None = None,
    ) -> None:
        self.bindir = bindir
        self.preload = preload  # shared_preload_libraries (a benchmark's pg_stat_statements)
        # What pg_ctl starts instead of the server binary: a benchmark's wrapper that runs
        # it under valgrind, say (it is given the server's arguments).
        self.postgres = postgres
        self.root = root
        self.data_dir = root / "data"
        self.socket_dir = root / "sock"
        self.log_file = root / "server.log"
        self.port = port
        self.host = "127.0.0.1"
        self.user = SUPERUSER
        self.password = password
        self._names = itertools.count(1)
        self._running = False

    def __repr__(self) -> str:
        return f"<PgServer {self.host}:{self.port} {self.root} running={self._running}>"

    # -- commands ---------------------------------------------------------------------------

    def _command(self, *argv: str | Path) -> list[str]:
        words = [str(a) for a in argv]
        if os.geteuid() == 0:
            return ["runuser", "-u", SERVER_USER, "--", *words]
        return words

    def _run(self, *argv: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self._command(*argv), capture_output=True, text=True, check=False, timeout=120
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{Path(str(argv[0])).name} failed ({done.returncode}): "
                f"{done.stdout.strip()} {done.stderr.strip()} (log: {self.log_file})"
            )
        return done

    def _options(self) -> str:
        return (
            f"-p {self.port} -c listen_addresses={self.host} "
            f"-c unix_socket_directories={self.socket_dir} "
            # Many runtimes per test (workers, a control process, the listener of each).
            "-c max_connections=200"
            + (f" -c shared_preload_libraries={self.preload}" if self.preload else "")
        )

    # -- lifecycle --------------------------------------------------------------------------

    def init(self) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            account = _ensure_user()
            for path in (self.root, self.socket_dir, pwfile):
                os.chown(path, account.pw_uid, account.pw_gid)
        self._run(
            self.bindir / "initdb",
            "-D",
            self.data_dir,
            "-U",
            SUPERUSER,
            "--pwfile",
            pwfile,
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--locale=C",
        )
        pwfile.unlink()

    def start(self) -> None:
        """Start (or start again after `stop_server`) and wait until it accepts connections."""
        self._run(
            self.bindir / "pg_ctl",
            "start",
            "-w",
            "-t",
            str(int(START_TIMEOUT)),
            "-D",
            self.data_dir,
            "-l",
            self.log_file,
            "-o",
            self._options(),
            *(() if self.postgres is None else ("-p", self.postgres)),
        )
        self._running = True

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server process, keeping its data (`start()` brings it back)."""
        if not self._running:
            return
        pg_ctl = self.bindir / "pg_ctl"
        done = self._run(pg_ctl, "stop", "-w", "-m", mode, "-D", self.data_dir, check=False)
        if done.returncode != 0:
            self._run(pg_ctl, "stop", "-w", "-m", "immediate", "-D", self.data_dir, check=False)
        self._running = False

    def restart(self) -> None:
        """Stop fast (every connection is dropped) and start again on the same port."""
        self.stop_server("fast")
        self.start()

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop_server("fast")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- databases --------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def admin_sql(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Run one statement as the superuser on the ``postgres`` database (autocommit)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            cur = conn.execute(sql.encode(), params)
            rows: list[tuple[object, ...]] = cur.fetchall() if cur.description else []
            return rows

    def create_database(self, name: str | None = None) -> str:
        """A fresh empty database; answers its URL."""
        if name is None:
            name = f"t{os.getpid()}_{next(self._names)}_{secrets.token_hex(3)}"
        if not name.isidentifier():
            raise ValueError(f"database name {name!r}: letters, digits and _ only")
        self.admin_sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def terminate_backends(self, database: str) -> int:
        """pg_terminate_backend every other connection to ``database``; answers how many."""
        rows = self.admin_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )
        return int(str(rows[0][0]))


def start_server(*, preload: str = "", postgres: Path | None = None) -> PgServer:
    """A new running server (``preload``: its ``shared_preload_libraries``; ``postgres``:
    what pg_ctl starts instead of the server binary); raises `ServerUnavailable` when the
    binaries are missing."""
    bindir = find_bindir()
    if bindir is None:
        raise ServerUnavailable(INSTALL_HINT)
    last: Exception | None = None
    # The free port may be taken between choosing it and the server binding it: choose again.
    for _ in range(3):
        root = Path(tempfile.mkdtemp(prefix="awaken-pg-"))
        server = PgServer(
            bindir=bindir,
            root=root,
            port=_free_port(),
            password=secrets.token_urlsafe(12),
            preload=preload,
            postgres=postgres,
        )
        try:
            server.init()
            server.start()
        except Exception as exc:
            last = exc
            server.stop()
            time.sleep(0.1)
            continue
        return server
    assert last is not None
    raise last


@contextlib.contextmanager
def running_server() -> Iterator[PgServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


def lock_waiters(url: str) -> int:
    """How many sessions of ``url``'s database wait for a lock now."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        ).fetchone()
        assert found is not None
        return int(found[0])


def row_versions(url: str, run_id: str) -> tuple[int, int]:
    """The run's row's ``xmin`` (the transaction that wrote it) and ``xmax`` (one that
    locked it, or 0), in ``url``'s ``awaken`` schema."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT xmin::text::bigint, xmax::text::bigint FROM awaken.runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
    assert found is not None
    return int(found[0]), int(found[1])


class Wire:
    """A TCP relay between the store and the server that counts round trips: each time the
    server answers after the client sent something, one exchange (the server sends
    nothing unasked on a store's connections but notifications, which only the listener's
    connection receives, and no store here listens)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self.exchanges = 0
        self._closing = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            relay = threading.Thread(target=self._relay, args=(client, server), daemon=True)
            self._threads.append(relay)
            relay.start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        answered = True  # (no exchange until the client has sent something)
        with client, server:
            while not self._closing:
                ready, _, _ = select.select([client, server], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        server.sendall(data)
                        answered = False
                    else:
                        # Counted before it is passed on: once the client has its answer,
                        # the exchange is in the count (counted after, a test that read the
                        # count as its call returned could miss it, or see it late).
                        if not answered:
                            answered = True
                            with self._lock:
                                self.exchanges += 1
                        client.sendall(data)

    def count(self) -> int:
        with self._lock:
            return self.exchanges

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for thread in self._threads:
            thread.join(5)
