"""Hooks into the SDK's high-level server (MCPServer on mcp 2.x, FastMCP on 1.x) and its stdio and streamable
HTTP transports, shared by both lines: where the user's own function runs and ends, a session's serving loop, the
stdio transport's stdout, a streamable HTTP app's stop and a caller hanging up on one request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wrapt

from otel_mcp_cancel import hang_up_watch
from otel_mcp_cancel.faults import contained, lost
from otel_mcp_cancel.hooks import asgi_servers
from otel_mcp_cancel.hooks.capabilities import EXCHANGE_DELIVERY, HTTP_APP_EXPORT, STDIO_DELIVERY, TOOL_ENDS
from otel_mcp_cancel.hooks.observations import HookSet, arg, observed, stdio_wire
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.http_exchange import AnswerForm, HttpExchange
from otel_mcp_cancel.request_state import LIVE, current_record
from otel_mcp_cancel.stdio_wire import StdioWire, follow


def _http_entry() -> str:
    """Where the session manager serves one HTTP request: `_handle_request`, behind its request-body limit (which
    the app calls, not `handle_request`, from mcp 1.2x on), or `handle_request` on releases without that limit."""
    try:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # as its hooks are applied
    except Exception:  # not there: the hook's own check names the capability lost
        return "handle_request"
    return "_handle_request" if hasattr(StreamableHTTPSessionManager, "_handle_request") else "handle_request"


class FrameworkHooks(HookSet):
    """Hooks into the high-level server (MCPServer on 2.x, FastMCP on 1.x) and the stdio transport.

    The framework calls the user's own function in `Tool.run`, `ResourceTemplate.create_resource`,
    `FunctionResource.read` and `Prompt.render`. Its return is where side effects are done; the
    framework may still reach a checkpoint (and be cancelled) after it.
    """

    def __init__(self, telemetry: Any) -> None:
        super().__init__(telemetry)
        self._answer_form = AnswerForm()  # how the SDK writes an answer into a POST's body, once seen

    def framework_hooks(self, package: str, stdio_bindings: tuple[str, ...]) -> list[Hook]:
        return [
            Hook(f"{package}.tools.base", "Tool.run", self.tool_run, TOOL_ENDS),
            Hook(f"{package}.resources.templates", "ResourceTemplate.create_resource", self.user_function,
                 "how a resource template's function ended (ghosts of resource reads)"),
            Hook(f"{package}.resources.types", "FunctionResource.read", self.user_function,
                 "how a resource's function ended (ghosts of resource reads)"),
            Hook(f"{package}.prompts.base", "Prompt.render", self.user_function,
                 "how a prompt's function ended (ghosts of prompts)"),
            # `stdio_server` is imported by name into other modules too; each binding is wrapped.
            *(self.stdio_hook(module) for module in stdio_bindings),
            # A streamable HTTP app's sessions, served from its lifespan: its end is where a worker stops.
            Hook("mcp.server.streamable_http_manager", "StreamableHTTPSessionManager.run", self.http_serving,
                 HTTP_APP_EXPORT),
            # Each HTTP request it serves, with the ASGI callables its answers go out through.
            Hook("mcp.server.streamable_http_manager", f"StreamableHTTPSessionManager.{_http_entry()}",
                 self.http_request, EXCHANGE_DELIVERY, ("scope", "receive", "send")),
        ]

    def stdio_hook(self, module: str) -> Hook:
        return Hook(module, "stdio_server", self.stdio_server,
                    f"stdio servers started through `{module}.stdio_server` (network.transport=pipe, answers "
                    "followed to stdout, the calls its host is about to stop)")

    # Not coroutines: each returns the one to await, the framework's own when no request is being served, so
    # that no layer of ours is paid on the way.
    def tool_run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = current_record.get()()
        if not self.active or record is None:
            return wrapped(*args, **kwargs)
        record.tool_registered = True  # the framework only runs tools it has registered
        record.registered_annotations = getattr(instance, "annotations", None)
        # The exception it raised, if any, is noted: the framework turns it into an isError result.
        return observed(record.note_handler, wrapped, args, kwargs, record.note_exception)

    def user_function(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = current_record.get()()
        if not self.active or record is None:
            return wrapped(*args, **kwargs)
        return observed(record.note_handler, wrapped, args, kwargs)

    async def session_run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """mcp 1.x `Server.run` (or a framework's override of it): a session's serving loop, unless
        stateless HTTP runs it for one request."""
        stateless = args[4] if len(args) > 4 else kwargs.get("stateless", False)
        if not self.active or stateless:
            return await wrapped(*args, **kwargs)
        over_stdio = stdio_wire.get() is not None
        self._telemetry.serving()
        with self._telemetry.sessions.session(arg(args, kwargs, 0, "read_stream"), over_stdio):
            return await wrapped(*args, **kwargs)

    def stdio_server(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The SDK's stdio transport, handed back as it is: while it runs, its requests are served over a pipe
        whose answers are followed to its own stdout."""
        transport = wrapped(*args, **kwargs)
        if not self.active or type(transport) is ObservedContext:  # a binding wrapped twice: once is enough
            return transport
        with contained("following a stdio transport"):
            wire = StdioWire()
            stdio_wire.set(wire)  # in the serving task's context: the writer and the handlers inherit it
            self._telemetry.serving()
            unfollow: list[Callable[[], None]] = []

            def entered(manager: Any) -> None:
                stdout = _transport_stdout(self.sdk.stdio_stdout, manager)
                if stdout is None:
                    lost(STDIO_DELIVERY, "the `stdio_server` entered holds no `stdout` to follow, nor does any "
                         "context manager another library wrapped it in; its calls are concluded as their answers "
                         "are handed to the transport", where="in this process: another instrumentation's wrapper "
                         "likely hides the transport")
                else:
                    unfollow.append(follow(stdout, wire))
                # Its caller's hang-up, seen even while a handler blocks the event loop.
                stdin_fd = _transport_stdin_fd(self.sdk.stdio_stdin, manager)
                stop_watching = None if stdin_fd is None else hang_up_watch.watch(
                    stdin_fd, lambda: self._telemetry.stdin_hung_up(wire))
                if stop_watching is not None:
                    unfollow.append(stop_watching)

            def left() -> None:
                for stop in unfollow:
                    stop()
                wire.release()

            return ObservedContext(transport, entered, left)
        return transport

    async def http_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """One HTTP request to a streamable HTTP app: its answer is followed to the ASGI server (`http_exchange`).
        Not with an event store: a caller that left may resume its stream and be given the answer then."""
        if not self.active or getattr(instance, "event_store", None) is not None:
            return await wrapped(*args, **kwargs)
        scope, receive, send = arg(args, kwargs, 0, "scope"), arg(args, kwargs, 1, "receive"), arg(args, kwargs, 2,
                                                                                                   "send")
        exchange = HttpExchange(scope, receive, send, (asgi_servers.uvicorn_disconnected,
                                                       asgi_servers.uvicorn_transport), self._answer_form)
        try:
            return await wrapped(scope, exchange.receive, exchange.send)
        finally:
            with contained("concluding an HTTP request's calls"):
                exchange.ended()

    def http_serving(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """A streamable HTTP app's session manager runs (its lifespan); as it stops, what is concluded is
        exported: uvicorn re-raises the signal it stopped on next, which kills the process before any exit hook."""
        manager = wrapped(*args, **kwargs)
        if not self.active:
            return manager
        with contained("following a streamable HTTP app"):
            self._telemetry.serving()
            return ObservedContext(manager, lambda _: None, self._telemetry.serving_ended)
        return manager

    async def request_stream_closing(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Streamable HTTP: the stream a request's answer goes out on is closing. Before the answer was
        written, its caller hung up (its HTTP request ended), and the answer will be dropped. Not so with an
        event store: a caller may resume the stream and be given the answer then."""
        if self.active:
            with contained("noticing a request's stream closing"):
                request_id, sdk = arg(args, kwargs, 0, "request_id"), self.sdk
                if request_id in sdk.http_request_streams(instance, ()) and sdk.http_event_store(instance) is None:
                    stream = sdk.http_write_stream(instance)  # the one its session (1.x) or dispatcher (2.x) writes to
                    wire_id = str(request_id)
                    written_by = sdk.session_write_stream
                    LIVE.caller_gone_of(lambda record: stream is not None and written_by(record.session) is stream
                                        and str(record.request_id) == wire_id)
        return await wrapped(*args, **kwargs)


class ObservedContext(wrapt.ObjectProxy):
    """One of the library's async context managers, handed back as it is, with the plugin told once it has been
    entered (`entered(manager)`) and once it has been left (`left()`)."""

    def __init__(self, manager: Any, entered: Callable[[Any], None], left: Callable[[], None]) -> None:
        super().__init__(manager)
        self._self_entered, self._self_left = entered, left

    async def __aenter__(self) -> Any:
        value = await self.__wrapped__.__aenter__()
        with contained("observing a transport start"):
            self._self_entered(self.__wrapped__)
        return value

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc_info)
        finally:
            with contained("observing a transport end"):
                self._self_left()


def _transport_stdout(local: Any, manager: Any) -> Any:
    """The stdout file object the SDK's entered `stdio_server` writes to (`local`: a local of its suspended
    generator, on both lines), or None."""
    stdout = local.in_context_manager(manager)
    return stdout if callable(getattr(stdout, "write", None)) and callable(getattr(stdout, "flush", None)) else None


def _transport_stdin_fd(local: Any, manager: Any) -> int | None:
    """The file descriptor the SDK's entered `stdio_server` reads its caller from (`local`: its `stdin`, an
    anyio file around a text wrapper), or None."""
    stdin = local.in_context_manager(manager)
    fileno = getattr(getattr(stdin, "wrapped", None), "fileno", None)
    try:
        return fileno() if callable(fileno) else None
    except (OSError, ValueError):  # detached, closed, or not a file at all
        return None
