"""JSON Schema checks for resume values (a ticket's ``accepts``).

Schemas are checked when a ticket is made, so a broken schema is the body's error, never a
resume's. Validators are built once per schema and kept in a small cache.

jsonschema checks recursively, a dozen Python frames or so per level of the schema (and of
the value, where the schema refers to itself), so a schema may nest at most
`MAX_SCHEMA_DEPTH` levels, well within Python's recursion limit, and a check that runs out
of stack all the same is refused as bad input, never left to end a run ``recursion_error``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ._errors import InvalidArgument, InvalidPayload
from ._json import FrozenDict, FrozenList, JsonValue, check_json

# Real schemas nest a few levels, rarely twenty.
MAX_SCHEMA_DEPTH = 64


def check_schema(schema: JsonValue, what: str) -> JsonValue:
    """Return ``schema`` frozen if it is a valid JSON Schema, else raise `InvalidArgument`."""
    import jsonschema.exceptions  # imported on first use: most runs never need it

    frozen = check_json(schema, what)
    if type(frozen) is not FrozenDict and type(frozen) is not bool:
        raise InvalidArgument(f"{what} must be a JSON Schema (an object or a bool)")
    depth = _depth(frozen)
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidArgument(
            f"{what} is nested {depth} levels deep; a ticket's schema may nest at most"
            f" {MAX_SCHEMA_DEPTH} levels (use $defs and $ref for a recursive shape)"
        )
    try:
        _validator(frozen)
    except jsonschema.exceptions.SchemaError as exc:
        raise InvalidArgument(f"{what} is not a valid JSON Schema: {exc.message}") from None
    except RecursionError:
        raise InvalidArgument(
            f"{what} is too complex to check (Python's recursion limit was reached);"
            " simplify the schema"
        ) from None
    return frozen


def check_value(schema: JsonValue, value: JsonValue, what: str) -> None:
    """Raise `InvalidPayload` naming the first mismatch if ``value`` fails ``schema``."""
    import jsonschema.exceptions

    try:
        error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(value))
    except RecursionError:
        raise InvalidPayload(
            f"{what} is too deeply nested to be checked against the ticket's schema (Python's"
            " recursion limit was reached); send a less nested value"
        ) from None
    if error is not None:
        where = "".join(f"[{p!r}]" for p in error.absolute_path) or " (the value itself)"
        raise InvalidPayload(
            f"{what} does not match the ticket's schema at $" + f"{where}: {error.message}"
        )


def _depth(value: JsonValue) -> int:
    """How many containers deep ``value`` nests (0 for a scalar), level by level, without
    recursing."""
    depth = 0
    level = [value]
    while True:
        containers = [v for v in level if type(v) is FrozenDict or type(v) is FrozenList]
        if not containers:
            return depth
        depth += 1
        level = [
            item
            for container in containers
            for item in (container.values() if type(container) is FrozenDict else container)
        ]


def _validator(schema: Any) -> Any:
    # Keyed by the schema's JSON text, not the schema: `True == 1` in Python, and a schema
    # saying `true` must not share a validator with one saying `1`.
    return _validator_for_text(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=256)
def _validator_for_text(text: str) -> Any:
    import jsonschema.validators

    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)
