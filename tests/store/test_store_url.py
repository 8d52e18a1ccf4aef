"""Store URLs in messages: a password in a URL is never shown."""

from __future__ import annotations

import pytest

from awaken_trio import InvalidArgument, open_runtime
from awaken_trio._redact import redact_url
from awaken_trio.store import open_store

SECRET = "s3cr/et"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://alice:pw@db.example:5432/runs",
            "postgresql://alice:***@db.example:5432/runs",
        ),
        ("postgresql://:pw@db/runs", "postgresql://:***@db/runs"),
        ("postgresql://alice:p@ss/w@db/runs", "postgresql://alice:***@db/runs"),
        ("postgresql://alice@db/runs", "postgresql://alice@db/runs"),
        ("postgresql://db:5432/runs?a=b@c", "postgresql://db:5432/runs?a=b@c"),
        (
            "postgresql://db/runs?user=alice&password=pw&sslmode=require",
            "postgresql://db/runs?user=alice&password=***&sslmode=require",
        ),
        ("sqlite:///runs.db", "sqlite:///runs.db"),
        ("memory://", "memory://"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_hides_passwords_and_nothing_else(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://alice:{SECRET}@db.example/runs?pool_size=0",
        f"postgres://alice:{SECRET}@db.example/runs?schema=1-bad",
        f"postgresql://alice:{SECRET}@db.example/runs?no_such_libpq_option=1",
        f"redis://:{SECRET}@cache:6379/0",
        f"postgresql://db.example/runs?password={SECRET}&pool_size=many",
        f"sqlite://alice:{SECRET}@host/runs.db",
        f"sqlite:///runs.db?password={SECRET}",
        f"sqlite:///runs.db?password={SECRET}&synchronous=full",
    ],
)
async def test_a_refused_store_url_never_shows_its_password(url: str) -> None:
    with pytest.raises(InvalidArgument) as from_open_store:
        open_store(url)
    with pytest.raises(InvalidArgument) as from_open_runtime:
        async with open_runtime(url):
            pass  # pragma: no cover
    for raised in (from_open_store.value, from_open_runtime.value):
        message = str(raised)
        assert "store URL" in message
        assert SECRET not in message
        assert "s3cr" not in message
        assert "***" in message


def test_a_store_url_that_is_not_a_str_never_shows_its_password() -> None:
    with pytest.raises(InvalidArgument) as raised:
        open_store(f"postgresql://alice:{SECRET}@db/runs".encode())  # type: ignore[arg-type]
    assert "s3cr" not in str(raised.value)
    assert "alice:***@db" in str(raised.value)
