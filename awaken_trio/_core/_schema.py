"""JSON Schema checks for resume values (a ticket's ``accepts``).

Schemas are checked when a ticket is made, so a broken schema is the body's error, never a
resume's. Validators are built once per schema and kept in a small cache.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ._errors import InvalidArgument, InvalidPayload
from ._json import FrozenDict, JsonValue, check_json


def check_schema(schema: JsonValue, what: str) -> JsonValue:
    """Return ``schema`` frozen if it is a valid JSON Schema, else raise `InvalidArgument`."""
    import jsonschema.exceptions  # imported on first use: most runs never need it

    frozen = check_json(schema, what)
    if type(frozen) is not FrozenDict and type(frozen) is not bool:
        raise InvalidArgument(f"{what} must be a JSON Schema (an object or a bool)")
    try:
        _validator(frozen)
    except jsonschema.exceptions.SchemaError as exc:
        raise InvalidArgument(f"{what} is not a valid JSON Schema: {exc.message}") from None
    return frozen


def check_value(schema: JsonValue, value: JsonValue, what: str) -> None:
    """Raise `InvalidPayload` naming the first mismatch if ``value`` fails ``schema``."""
    import jsonschema.exceptions

    error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(value))
    if error is not None:
        where = "".join(f"[{p!r}]" for p in error.absolute_path) or " (the value itself)"
        raise InvalidPayload(
            f"{what} does not match the ticket's schema at $" + f"{where}: {error.message}"
        )


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
