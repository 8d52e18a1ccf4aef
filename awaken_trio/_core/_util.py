"""Small helpers: describing hostile objects safely, and classes users must not build."""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

_REPR_LIMIT = 500


def safe_str(value: object) -> str:
    """``str(value)``, or a description of why it could not be had (its ``__str__`` raised)."""
    try:
        text = str(value)
    except Exception as exc:
        return f"<{type(value).__qualname__} whose __str__ raised {type(exc).__qualname__}>"
    if type(text) is not str:  # pragma: no cover - str() always returns a str
        return f"<{type(value).__qualname__}>"
    return text


def safe_repr(value: object) -> str:
    """``repr(value)`` cut to a readable length, or a placeholder if ``__repr__`` raised."""
    try:
        text = repr(value)
    except Exception as exc:
        return f"<{type(value).__qualname__} whose __repr__ raised {type(exc).__qualname__}>"
    return text if len(text) <= _REPR_LIMIT else text[:_REPR_LIMIT] + "..."


class NoPublicConstructor(type):
    """Metaclass for objects the runtime hands out but users must not build (Trio's
    pattern): ``Cls(...)`` raises, naming where one comes from (the class's
    ``_obtained_from``); the runtime builds them with ``Cls._create(...)``."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        where = getattr(cls, "_obtained_from", "the runtime")
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor; {where}")

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]


def fixup_module_metadata(module_name: str, namespace: dict[str, Any]) -> None:
    """Make public names report the public module (``awaken_trio.RunState``, and nested
    variants such as ``awaken_trio.RunState.Ended``), as Trio does for its own names, so
    tracebacks, reprs and docs never show a private module."""
    seen: set[int] = set()

    def fix(obj: object, qualname: str) -> None:
        if id(obj) in seen or not getattr(obj, "__module__", "").startswith("awaken_trio."):
            return
        if not getattr(obj, "__module__", "").split(".")[-1].startswith("_"):
            return
        seen.add(id(obj))
        obj.__module__ = module_name
        if isinstance(obj, type):
            obj.__qualname__ = qualname
            for attr_name, value in list(vars(obj).items()):
                if isinstance(value, type) and value.__name__ == attr_name:
                    fix(value, f"{qualname}.{attr_name}")

    for name in namespace["__all__"]:
        obj = namespace[name]
        fix(obj, getattr(obj, "__qualname__", name) if not isinstance(obj, type) else name)
