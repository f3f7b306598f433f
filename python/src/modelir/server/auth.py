"""Bearer-token authentication for the gRPC server.

Reflection and the server-level health check (service `""` or `modelir.v1.ModelService`) stay open, so load
balancers can probe without a token. Health of a named model needs the token: otherwise anyone could enumerate the
model names by probing.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeAlias, cast

import grpc
from grpc_status import rpc_status

from modelir import errors
from modelir.errors.rich_status import to_status

_OPEN_PREFIXES = ("/grpc.reflection.",)
_HEALTH_PREFIX = "/grpc.health.v1.Health/"
_OPEN_HEALTH_SERVICES = frozenset({"", "modelir.v1.ModelService"})
# Handlers of any method: the interceptor sees every service's messages, whatever their types.
_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: frozenset[str]) -> None:
        if not tokens:
            raise ValueError("bearer auth needs at least one token")
        self._tokens = [t.encode() for t in tokens]

    def _accepts(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
        for key, value in metadata or ():
            if key != "authorization" or not isinstance(value, str):
                continue
            scheme, _, offered = value.strip().partition(" ")
            if scheme.lower() != "bearer":  # auth schemes are case-insensitive (RFC 7235, section 2.1)
                return False
            # Compare against every token in constant time, so timing says nothing about which matched.
            return any([hmac.compare_digest(offered.strip().encode(), token) for token in self._tokens])
        return False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_OPEN_PREFIXES):
            return handler
        if self._accepts(handler_call_details.invocation_metadata):
            return handler
        status = rpc_status.to_status(
            to_status(errors.UnauthenticatedError("a valid `authorization: Bearer <token>` header is required"))
        )
        if handler_call_details.method.startswith(_HEALTH_PREFIX):
            return _health_for_open_services_only(handler, status)

        async def refuse(request: Any, context: _Context) -> None:
            await context.abort_with_status(status)

        async def refuse_stream(request: Any, context: _Context) -> AsyncIterator[None]:
            await context.abort_with_status(status)
            yield  # pragma: no cover - makes this an async generator, as streaming handlers must be

        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(refuse_stream, **kwargs)
        return grpc.unary_unary_rpc_method_handler(refuse, **kwargs)


def _health_for_open_services_only(handler: _Handler, status: grpc.Status) -> _Handler:
    """Health `Check` and `Watch` answer without a token only for the server itself, never for a named model."""
    kwargs = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        # An aio server's behaviours are coroutines taking the aio context (the stubs type the sync ones).
        check = cast(Callable[..., Awaitable[Any]], handler.unary_unary)

        async def guarded_check(request: Any, context: _Context) -> Any:
            if request.service not in _OPEN_HEALTH_SERVICES:
                await context.abort_with_status(status)
            return await check(request, context)

        return grpc.unary_unary_rpc_method_handler(guarded_check, **kwargs)
    # grpc's aio health servicer writes its answers with `context.write` from a coroutine; a generated streaming
    # handler is an async generator. Either may stand behind `unary_stream`.
    watch = cast(Callable[..., Any], handler.unary_stream)

    async def guarded_watch(request: Any, context: _Context) -> AsyncIterator[Any]:
        if request.service not in _OPEN_HEALTH_SERVICES:
            await context.abort_with_status(status)
        answers = watch(request, context)
        if inspect.isawaitable(answers):
            await answers
            return
        async for answer in answers:
            yield answer

    return grpc.unary_stream_rpc_method_handler(guarded_watch, **kwargs)
