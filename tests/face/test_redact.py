"""One redaction for every face, log and store error (`awaken_trio._redact`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awaken_trio import _redact
from awaken_trio._redact import MASK, redact, redact_conninfo, redact_secret, redact_url

SECRET = "s3cr/et@x"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "cannot open postgresql://bob:hunter2@db/x now",
            "cannot open postgresql://bob:***@db/x now",
        ),
        ("sqlite:///runs.db", "sqlite:///runs.db"),
        ("host=db password=hunter2 dbname=x", "host=db password=*** dbname=x"),
        ("?PASSWORD=hunter2&x=1", "?PASSWORD=***&x=1"),
        ("no secret here", "no secret here"),
    ],
)
def test_redact_hides_passwords_in_free_text(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://bob:{SECRET}@db:5432/x", "postgresql://bob:***@db:5432/x"),
        ("postgresql://bob@db/x", "postgresql://bob@db/x"),
        ("https://h/v1?token=abc&y=2", "https://h/v1?token=***&y=2"),
        ("sqlite:////abs/runs.db", "sqlite:////abs/runs.db"),
    ],
)
def test_redact_url_hides_the_user_password_and_secret_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("conninfo", "shown"),
    [
        ("host=db password='a b\\' c' dbname=x", "host=db password=*** dbname=x"),
        ("host=db PASSWORD = hunter2", "host=db PASSWORD = ***"),
        (f"postgres://bob:{SECRET}@db/x", "postgres://bob:***@db/x"),
    ],
)
def test_redact_conninfo_takes_keyword_strings_and_urls(conninfo: str, shown: str) -> None:
    assert redact_conninfo(conninfo) == shown
    assert "hunter2" not in shown
    assert SECRET not in shown


def test_redact_secret_hides_a_known_password_wherever_a_driver_put_it() -> None:
    text = f"FATAL: password authentication failed ({SECRET!r}) for postgresql://u:{SECRET}@h/d"
    shown = redact_secret(text, SECRET)
    assert SECRET not in shown
    assert "***" in shown
    assert redact_secret("nothing", None) == "nothing"
    assert redact_secret("nothing", "") == "nothing"


def _every_pattern(text: str) -> str:
    """`redact` with both of its patterns always searched: what its literal checks skip
    must be what these searches cannot match."""
    text = _redact._URL_PASSWORD.sub(rf"\g<head>:{MASK}@", text)
    return _redact._PASSWORD_OPTION.sub(rf"\g<head>{MASK}", text)


# Text made of the pieces the patterns look for, so a random draw hits them often.
_PIECES = st.sampled_from(
    ["://", ":", "@", "=", "password", "PassWord", "pg", "bob", "s3cret", " ", "/", "'", "é"]
)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=16).map("".join))
def test_redact_skips_a_search_only_where_it_could_not_match(text: str) -> None:
    assert redact(text) == _every_pattern(text)
