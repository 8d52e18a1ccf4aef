"""What a checkout ships besides the code: its license, and install advice that works."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from awaken_trio.agent import OpenAIChatModel

ROOT = Path(__file__).resolve().parent.parent
CHECKOUT_INSTALL = "pip install -e '.[openai]'"


def test_the_license_file_is_the_mit_license_pyproject_names() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the awaken_trio authors\n" in text
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_a_missing_httpx_says_how_to_install_it_from_a_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # what an absent package looks like
    with pytest.raises(ImportError) as missing:
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    assert CHECKOUT_INSTALL in str(missing.value)


def test_install_advice_names_the_checkout_not_a_package_index() -> None:
    sources = [*(ROOT / "awaken_trio").rglob("*.py"), *(ROOT / "examples").glob("*.py")]
    sources += [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    advice = {
        path.relative_to(ROOT).as_posix(): found
        for path in sources
        if (found := re.findall(r"pip install [^\n`]*", path.read_text()))
    }
    assert advice, "no install advice found at all"
    for path, commands in advice.items():
        for command in commands:
            assert " -e " in f" {command} ", f"{path}: {command!r} does not install the checkout"
    assert any(CHECKOUT_INSTALL in command for command in advice["awaken_trio/agent/_openai.py"])
    assert any(CHECKOUT_INSTALL in command for command in advice["examples/agent.py"])
