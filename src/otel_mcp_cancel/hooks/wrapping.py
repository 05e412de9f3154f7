"""Applying and removing wrapt wrappers, tolerating SDK versions that lack a hook point."""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import wrapt
from opentelemetry.instrumentation.utils import unwrap

logger = logging.getLogger("otel_mcp_cancel")


class Hook(NamedTuple):  # a named tuple: made in a tenth of a frozen dataclass's time, at start-up
    module: str
    attribute: str  # "function" or "Class.method"
    wrapper: Callable[[Any, Any, Any, Any], Any]
    inherited: bool = False  # the class inherits the method: removing the hook deletes the class's own copy


def apply(hooks: Iterable[Hook]) -> list[Hook]:
    """Wrap every hook point that exists; return the ones wrapped."""
    applied = []
    for hook in hooks:
        try:
            wrapt.wrap_function_wrapper(hook.module, hook.attribute, hook.wrapper)
        except (ImportError, AttributeError):
            logger.warning(
                "otel_mcp_cancel: %s.%s not found; requests on that path are not traced", hook.module, hook.attribute
            )
            continue
        applied.append(hook)
    return applied


def target(hook: Hook) -> tuple[Any, str]:
    """The object holding the hooked callable, and the callable's name on it."""
    owner_path, _, name = hook.attribute.rpartition(".")
    owner: Any = importlib.import_module(hook.module)
    if owner_path:
        owner = getattr(owner, owner_path)
    return owner, name


def remove(hooks: Iterable[Hook]) -> None:
    for hook in hooks:
        owner, name = target(hook)
        # A binding made of a callable already hooked where it is defined (its module was imported after that
        # hook was applied) holds that wrapper under this one: unwrapped down to the first layer not ours.
        while _ours(inspect.getattr_static(owner, name, None)):
            unwrap(owner, name)
        if hook.inherited:
            delattr(owner, name)


def _ours(callable_: object) -> bool:
    wrapper = getattr(callable_, "_self_wrapper", None)
    return getattr(wrapper, "__module__", "").startswith("otel_mcp_cancel")
