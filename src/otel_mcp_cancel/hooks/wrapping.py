"""Applying and removing wrapt wrappers, tolerating SDK versions that lack a hook point."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry.instrumentation.utils import unwrap

logger = logging.getLogger("otel_mcp_cancel")


@dataclass(frozen=True)
class Hook:
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
        unwrap(owner, name)
        if hook.inherited:
            delattr(owner, name)
