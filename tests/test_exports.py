"""The public surface: what each public module exports, the module its names report, and
the types the runtime hands out but nobody builds."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from types import ModuleType
from typing import Any

import pytest

import awaken_trio
import awaken_trio.client

PUBLIC_MODULES = [
    "awaken_trio",
    "awaken_trio.store",
    "awaken_trio.testing",
    "awaken_trio.agent",
    "awaken_trio.client",
    # Needs the [pydantic-ai] extra (the test extra installs it too); skipped without it,
    # except under CI=true, where it must be there.
    pytest.param(
        "awaken_trio.integrations.pydantic_ai",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("pydantic_ai") is None and os.environ.get("CI") != "true",
            reason="pydantic-ai is not installed (pip install -e '.[pydantic-ai]')",
        ),
    ),
]


def public_module(name: str) -> ModuleType:
    return importlib.import_module(name)


def defined_by_the_package(obj: object) -> bool:
    """A class or function written in awaken_trio (not a re-exported typing alias)."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return False
    return str(getattr(obj, "__module__", "")).split(".")[0] == "awaken_trio"


def nested_classes(cls: type) -> list[tuple[str, type]]:
    """The package's classes reachable as attributes of ``cls`` under their own name
    (variants such as ``RunState.Ended``), recursively, with the path they are reached by."""
    found: list[tuple[str, type]] = []
    seen: set[int] = {id(cls)}

    def walk(outer: type, path: str) -> None:
        for attr, value in vars(outer).items():
            if (
                inspect.isclass(value)
                and value.__name__ == attr
                and defined_by_the_package(value)
                and id(value) not in seen
            ):
                seen.add(id(value))
                found.append((f"{path}.{attr}", value))
                walk(value, f"{path}.{attr}")

    walk(cls, cls.__name__)
    return found


# --------------------------------------------------------------------------- exports


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_a_public_module_lists_existing_public_names_in_all(module_name: str) -> None:
    module = public_module(module_name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list | tuple), f"{module_name} has no __all__"
    assert exported, f"{module_name}.__all__ is empty"
    assert all(type(name) is str for name in exported)
    assert len(set(exported)) == len(exported), f"{module_name}.__all__ repeats a name"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == [], f"{module_name}.__all__ names what it does not define"
    private = [name for name in exported if name.startswith("_")]
    assert private == [], f"{module_name}.__all__ exports private names"
    namespace: dict[str, Any] = {}
    exec(f"from {module_name} import *", namespace)  # the star import works
    assert set(exported) <= set(namespace)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_names_report_their_public_module(module_name: str) -> None:
    module = public_module(module_name)
    checked = 0
    for name in module.__all__:
        obj = getattr(module, name)
        if not defined_by_the_package(obj):
            continue
        checked += 1
        assert obj.__module__ == module_name, f"{module_name}.{name} says {obj.__module__}"
        assert obj.__qualname__ == name, f"{module_name}.{name} says {obj.__qualname__}"
        if inspect.isclass(obj):
            for path, nested in nested_classes(obj):
                assert nested.__module__ == module_name, f"{path} says {nested.__module__}"
                assert nested.__qualname__ == path, f"{path} says {nested.__qualname__}"
    assert checked, f"{module_name} exports no class or function of its own"


@pytest.mark.parametrize(
    ("variant", "qualname"),
    [
        (awaken_trio.RunState.Queued, "RunState.Queued"),
        (awaken_trio.RunState.Running, "RunState.Running"),
        (awaken_trio.RunState.Awaiting, "RunState.Awaiting"),
        (awaken_trio.RunState.Ended, "RunState.Ended"),
        (awaken_trio.EndCause.NaturalEnd, "EndCause.NaturalEnd"),
        (awaken_trio.EndCause.MaxSteps, "EndCause.MaxSteps"),
        (awaken_trio.EndCause.Cancelled, "EndCause.Cancelled"),
        (awaken_trio.EndCause.Stopped, "EndCause.Stopped"),
        (awaken_trio.EndCause.Failed, "EndCause.Failed"),
        (awaken_trio.EndCause.Indeterminate, "EndCause.Indeterminate"),
        (awaken_trio.LiveCommand.Cancel, "LiveCommand.Cancel"),
        (awaken_trio.LiveCommand.Pause, "LiveCommand.Pause"),
        (awaken_trio.LiveCommand.Wake, "LiveCommand.Wake"),
        (awaken_trio.LiveCommand.Message, "LiveCommand.Message"),
    ],
    ids=lambda value: value if isinstance(value, str) else "variant",
)
def test_variants_report_the_public_module_and_their_family(variant: type, qualname: str) -> None:
    assert variant.__module__ == "awaken_trio"
    assert variant.__qualname__ == qualname
    family = getattr(awaken_trio, qualname.split(".")[0])
    assert (qualname, variant) in nested_classes(family)
    assert repr(variant).startswith(f"<class 'awaken_trio.{qualname}'")


# --------------------------------------------------------------------------- constructors


@pytest.mark.parametrize(
    ("cls", "hints"),
    [
        pytest.param(awaken_trio.Runtime, ["open_runtime"], id="Runtime"),
        pytest.param(awaken_trio.RunHandle, ["start", "resume"], id="RunHandle"),
        pytest.param(awaken_trio.EventStream, ["events"], id="EventStream"),
        pytest.param(awaken_trio.StreamReader, ["read_stream"], id="StreamReader"),
        pytest.param(awaken_trio.StreamWriter, ["ctx.stream"], id="StreamWriter"),
        pytest.param(awaken_trio.client.ChunkIterator, ["Client.read_stream"], id="ChunkIterator"),
        pytest.param(
            awaken_trio.client.AsyncChunkIterator,
            ["AsyncClient.read_stream"],
            id="AsyncChunkIterator",
        ),
        # A body is handed its context: the message must say so.
        pytest.param(awaken_trio.RunContext, ["body"], id="RunContext"),
    ],
)
def test_types_the_runtime_hands_out_have_no_public_constructor(
    cls: type[Any], hints: list[str]
) -> None:
    for args, kwargs in [((), {}), ((1, "two"), {"three": 3})]:
        with pytest.raises(TypeError) as raised:
            cls(*args, **kwargs)
        message = str(raised.value)
        assert f"{cls.__module__}.{cls.__name__} has no public constructor" in message
        for hint in hints:
            assert hint in message, f"{message!r} does not say how to get one ({hint})"


def test_the_current_run_and_its_error_are_public_names() -> None:
    for name in ("current_context", "NotInRun"):
        assert name in awaken_trio.__all__
        assert getattr(awaken_trio, name).__module__ == "awaken_trio"
    assert issubclass(awaken_trio.NotInRun, awaken_trio.AwakenError)
    assert "StepStore" in importlib.import_module("awaken_trio.store").__all__
