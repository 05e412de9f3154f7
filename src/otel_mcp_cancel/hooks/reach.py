"""A name of an SDK's internals that the plugin reaches for, besides the callables it wraps (`wrapping.Hook`):
something it imports (`Name`), an attribute it reads on the SDK's objects (`Attribute`), a local it reads off
the SDK's frames (`Local`). Each is declared, in the one module of its SDK line (`sdk_v1`, `sdk_v2`,
`sdk_fastmcp`), with the capabilities it serves, and probed as hooks are applied (`wrapping.apply`): one that a
release removed or reshaped loses those capabilities, named in one WARNING, and is then `available` no more, so
that what reads it steps aside rather than guess. Nothing here is imported before it is probed.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

from otel_mcp_cancel.faults import lost


class Reach:
    capabilities: tuple[str, ...]
    available = False  # probed, and found as declared

    def misfit(self) -> str | None:
        """Why the installed release does not have it as declared, or None (and it is then available)."""
        raise NotImplementedError

    def probe(self) -> str | None:
        found = self.misfit()
        self.available = found is None
        return found


class Name(Reach):
    """Something an SDK module defines (a helper, a class, a constant), imported as it is probed."""

    def __init__(self, capabilities: str | tuple[str, ...], module: str, path: str) -> None:
        self.capabilities = (capabilities,) if isinstance(capabilities, str) else capabilities
        self.module, self.path = module, path
        self._value: Any = None

    @property
    def where(self) -> str:
        return f"{self.module}.{self.path}"

    def misfit(self) -> str | None:
        try:
            value: Any = importlib.import_module(self.module)
            for part in self.path.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError):
            self._value = None
            return f"`{self.where}` is not there"
        self._value = value
        return None

    @property
    def value(self) -> Any:
        return self._value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._value(*args, **kwargs)


class Attribute(Reach):
    """An attribute the plugin reads on instances of an SDK class: probed by the class's own code setting or
    reading it (or declaring it), as an instance is not at hand when hooks apply."""

    def __init__(self, capabilities: str | tuple[str, ...], owner: Name, name: str) -> None:
        self.capabilities = (capabilities,) if isinstance(capabilities, str) else capabilities
        self.owner, self.name = owner, name

    def misfit(self) -> str | None:
        if not self.owner.available and self.owner.probe() is not None:
            return self.owner.misfit()
        kind = self.owner.value
        if not _declares(kind, self.name):
            return f"`{self.owner.where}` no longer has `{self.name}`"
        return None

    def __call__(self, instance: Any, default: Any = None) -> Any:
        """Its value on `instance`, or `default` where the instance has none (or it was not found as declared)."""
        return getattr(instance, self.name, default) if self.available else default


class MetAttribute(Reach):
    """An attribute the plugin reads on objects of a library it never imports, met at run time (the ASGI server's
    request cycle behind the `receive` it hands an application): probed on the first object of each class met, by
    the class's own code; a class of that library without it loses the capabilities, named in one WARNING."""

    available = True  # nothing to probe until an object is met

    def __init__(self, capabilities: str, package: str, name: str) -> None:
        self.capabilities = (capabilities,)
        self.package, self.name = package, name
        self._fits: dict[type, bool] = {}  # by class met: a few, the library's own

    @property
    def where(self) -> str:
        return f"{self.package}*.{self.name}"

    def misfit(self) -> str | None:
        self._fits = {}  # each instrumentation meets the classes afresh
        return None

    def __call__(self, instance: Any, default: Any = None) -> Any:
        """Its value on `instance`, or `default` where the instance is not of the library or its class lacks it."""
        kind = type(instance)
        fits = self._fits.get(kind)
        if fits is None:
            ours = kind.__module__.startswith(self.package)
            fits = ours and _declares(kind, self.name)
            if ours and not fits:
                lost(self.capabilities[0], f"`{kind.__module__}.{kind.__qualname__}` no longer has `{self.name}`")
            if len(self._fits) < 16:
                self._fits[kind] = fits
        return getattr(instance, self.name, default) if fits else default


class Local(Reach):
    """A local variable of an SDK function, read off its running frame (or a suspended generator's)."""

    def __init__(self, capabilities: str | tuple[str, ...], function: Name, name: str) -> None:
        self.capabilities = (capabilities,) if isinstance(capabilities, str) else capabilities
        self.function, self.name = function, name
        self.code: CodeType | None = None

    def misfit(self) -> str | None:
        if not self.function.available and self.function.probe() is not None:
            return self.function.misfit()
        code = getattr(inspect.unwrap(self.function.value), "__code__", None)
        if code is None or self.name not in (*code.co_varnames, *code.co_cellvars):
            return f"`{self.function.where}` no longer has a local `{self.name}`"
        self.code = code
        return None

    def of(self, frame: FrameType | None) -> Any:
        """Its value in `frame`, if `frame` runs its function."""
        if not self.available or frame is None or frame.f_code is not self.code:
            return None
        return frame.f_locals.get(self.name)

    def in_context_manager(self, manager: Any, depth: int = 4) -> Any:
        """Its value in the suspended generator behind an entered `asynccontextmanager`, or behind the ones other
        libraries wrapped that one in (up to `depth` layers): a layer keeps the manager it entered on its own
        suspended frame (its bound `__aexit__`), which the generator's referents hold."""
        generator = getattr(manager, "gen", None)
        for _ in range(depth):
            frame = getattr(generator, "ag_frame", None)
            if frame is None or not self.available:
                return None
            if frame.f_code is self.code:
                return frame.f_locals.get(self.name)
            import gc  # only where another library's layer stands in the way

            generator = next(filter(None, map(_entered_generator, gc.get_referents(generator))), None)
        return None

    def in_callers(self, frame: FrameType | None, depth: int = 8) -> Any:
        """Its value in the nearest of `frame`'s callers (within `depth`) that runs its function."""
        if not self.available:
            return None
        for _ in range(depth):
            if frame is None:
                return None
            if frame.f_code is self.code:
                return frame.f_locals.get(self.name)
            frame = frame.f_back
        return None


def _entered_generator(referent: object) -> Any:
    """The suspended generator of the context manager whose bound `__aexit__` a frame holds (`referent`), if it is
    one: what `async with` keeps of the manager it entered."""
    try:
        generator = getattr(getattr(referent, "__self__", None), "gen", None)
        return generator if getattr(generator, "ag_frame", None) is not None else None
    except Exception:  # a proxy's attribute that raises: not a manager we follow
        return None


def _declares(kind: type, name: str) -> bool:
    """Whether a class (or a base of it, but `object`) declares, sets or reads attribute `name`."""
    for base in kind.__mro__[:-1]:
        if name in vars(base) or name in getattr(base, "__annotations__", {}):
            return True
        for member in vars(base).values():
            if any(name in code.co_names for code in _codes(member)):
                return True
    return False


def _codes(member: Any) -> Iterator[CodeType]:
    function = getattr(member, "__func__", member)  # a classmethod's or staticmethod's
    if isinstance(function, property):
        for accessor in (function.fget, function.fset):
            yield from _codes(accessor)
        return
    code = getattr(inspect.unwrap(function), "__code__", None) if callable(function) else None
    stack = [code] if code is not None else []
    while stack:  # and the code of the functions defined inside it
        current = stack.pop()
        yield current
        stack += [constant for constant in current.co_consts if isinstance(constant, CodeType)]
