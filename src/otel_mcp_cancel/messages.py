"""Reading the SDK's messages as they come: a wire dict, a pydantic model of either mcp line, or a 1.x
`ServerResult`/`ClientResult` around one. Pure, and cheap for the shapes most requests have: these run on every
request."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

_ABSENT = object()


@functools.lru_cache(maxsize=256)
def _is_mapping_type(kind: type) -> bool:
    return issubclass(kind, Mapping)


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """`isinstance(value, Mapping)`, asked of the ABC once per type: it runs on every request, for dicts
    and models alike. Where a dict is what usually comes, callers ask `type(value) is dict` first: a call
    saved on every request."""
    return _is_mapping_type(type(value))  # type: ignore[arg-type]  # a type is hashable; mypy reads it as object


def model_field(model: object, name: str) -> Any:
    """`model.name`, or None. For a pydantic model, read from its fields and extras: its `__getattr__` raises
    (and getattr's default catches) for every absent name, a cost paid on every request."""
    values = getattr(model, "__dict__", None)
    if values is not None and name in values:
        return values[name]
    extra: Any = getattr(model, "__pydantic_extra__", _ABSENT)
    if extra is not _ABSENT:
        return extra.get(name) if extra else None
    return getattr(model, name, None)


def model_values(message: Any) -> dict[str, Any] | None:
    """A pydantic model's field values by name (the inner model's, for a 1.x `ServerResult`/`ClientResult`),
    when they are all it holds: None for a model with extras, a wire dict, or anything else, which are read
    name by name. Most answers are plain models: one look decides what they hold."""
    values = getattr(message, "__dict__", None)
    if values is not None and "root" in values:
        message = values["root"]
        values = getattr(message, "__dict__", None)
    if values is None or getattr(message, "__pydantic_extra__", _ABSENT) is _ABSENT:
        return None
    return None if message.__pydantic_extra__ else values


def _unwrapped(message: object) -> object:
    """The model inside a 1.x `ServerResult`/`ClientResult` (a root model), or the message itself."""
    root = model_field(message, "root")
    return message if root is None else root


def message_field(message: object, name: str) -> Any:
    """A field (named as on the wire) of a wire dict, a model, or a 1.x `ServerResult`/`ClientResult` around
    one; None if absent. A model may name it in snake case (the 2026-07-28 tasks extension's models do)."""
    if type(message) is dict or is_mapping(message):
        return message.get(name)
    model = _unwrapped(message)
    value = model_field(model, name)
    return value if value is not None or name.islower() else model_field(model, _snake_case(name))


_PLAIN_TYPES = frozenset({str, bytes, int, float, bool, list, tuple, type(None)})


def is_tool_error(result: object) -> bool:
    """A tools/call result with isError: the wire dict, the model a tool returned, or a 1.x ServerResult."""
    if type(result) in _PLAIN_TYPES:  # what most tools return: no isError in it
        return False
    if type(result) is dict or is_mapping(result):
        return result.get("isError") is True
    values = model_values(result)
    if values is not None:
        return values.get("is_error") is True or values.get("isError") is True
    result = _unwrapped(result)
    return model_field(result, "is_error") is True or model_field(result, "isError") is True


@functools.lru_cache(maxsize=64)
def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def request_fields(params: object) -> Mapping[str, Any] | None:
    """A request's params if they are a mapping (what the functions below read), else None."""
    return params if type(params) is dict or is_mapping(params) else None


def tool_arguments(params: object) -> Any:
    """The arguments a tools/call request carries, as sent (None if its params are not a mapping)."""
    if type(params) is dict:  # the wire's own, most often (a ghost's subject reads it for every answered call)
        return params.get("arguments")
    fields = request_fields(params)
    return fields.get("arguments") if fields is not None else None
