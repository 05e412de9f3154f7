"""Applying and removing wrapt wrappers, checked against the installed release before anything is wrapped.

The plugin reaches into the libraries' internals, which a new minor release may move. So each hook names the
capability it serves, and the hooks of one capability are applied together or not at all: every target must be
there, with the parameters its wrapper reads where it reads them, and awaitable where its wrapper awaits it.
A capability whose targets do not all pass is named in one WARNING (`faults.lost`) and its hooks are left
unapplied, so that it is missing rather than wrong (a request whose answer is never seen is not guessed at);
every other capability works as before, and the host is untouched.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import wrapt
from opentelemetry.instrumentation.utils import unwrap

from otel_mcp_cancel.faults import lost
from otel_mcp_cancel.hooks.reach import Reach


class Hook(NamedTuple):  # a named tuple: made in a tenth of a frozen dataclass's time, at start-up
    module: str
    attribute: str  # "function" or "Class.method"
    wrapper: Callable[[Any, Any, Any, Any], Any]
    # What the plugin can no longer observe without it, as an operator reads it; hooks naming the same one are
    # applied together or not at all. Empty: the target alone.
    capability: str = ""
    # The target's parameters the wrapper reads, by name, from the first after `self` on: each must be there,
    # at that position.
    params: tuple[str, ...] = ()
    inherited: bool = False  # the class inherits the method: removing the hook deletes the class's own copy

    @property
    def target_name(self) -> str:
        return f"{self.module}.{self.attribute}"


def apply(hooks: Iterable[Hook], reaches: Iterable[Reach] = ()) -> list[Hook]:
    """Wrap every capability whose targets all fit and whose reaches are all found; name each one that does not,
    once (a reach not found is not `available`, so what reads it steps aside). Returns the hooks wrapped."""
    misfits: dict[str, str] = {}
    for reach in reaches:
        found = reach.probe()
        for capability in reach.capabilities if found is not None else ():
            misfits.setdefault(capability, found)  # type: ignore[arg-type]  # not None here
    by_capability: dict[str, list[Hook]] = {}
    for hook in hooks:
        by_capability.setdefault(hook.capability or f"what `{hook.target_name}` tells", []).append(hook)
    applied = []
    for capability, group in by_capability.items():
        misfit = misfits.pop(capability, None) or next((found for found in map(misfit_of, group) if found), None)
        if misfit is not None:
            lost(capability, misfit)
            continue
        for hook in group:
            wrapt.wrap_function_wrapper(hook.module, hook.attribute, hook.wrapper)
            applied.append(hook)
    for capability, misfit in misfits.items():  # capabilities that only read: nothing to leave unwrapped
        lost(capability, misfit)
    return applied


def misfit_of(hook: Hook) -> str | None:
    """Why the installed release does not fit `hook`, or None."""
    try:
        owner, name = target(hook)
        found = getattr(owner, name)
    except (ImportError, AttributeError):
        return f"`{hook.target_name}` is not there"
    if inspect.iscoroutinefunction(hook.wrapper) and not inspect.iscoroutinefunction(found):
        return f"`{hook.target_name}` is no longer a coroutine function"
    if hook.params:
        try:
            parameters = list(inspect.signature(found).parameters)
        except (TypeError, ValueError):
            return f"`{hook.target_name}` has no signature to check"
        if "." in hook.attribute and not isinstance(inspect.getattr_static(owner, name), staticmethod):
            parameters = parameters[1:]  # self, or cls: wrapt hands the instance on apart
        if parameters[:len(hook.params)] != list(hook.params):
            return f"`{hook.target_name}` takes ({', '.join(parameters)}), not ({', '.join(hook.params)}, ...)"
    return None


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
