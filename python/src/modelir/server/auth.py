"""Bearer-token authentication for the gRPC server. Health checks and reflection stay open."""

from __future__ import annotations

import hmac

import grpc
from grpc_status import rpc_status

from modelir import errors
from modelir.rich_status import to_status

_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: frozenset[str]) -> None:
        if not tokens:
            raise ValueError("bearer auth needs at least one token")
        self._tokens = [t.encode() for t in tokens]

    def _accepts(self, metadata) -> bool:
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                offered = value.removeprefix("Bearer ").strip().encode()
                # Compare against every token in constant time, so timing says nothing about which matched.
                return any([hmac.compare_digest(offered, token) for token in self._tokens])
        return False

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_OPEN_PREFIXES):
            return handler
        if self._accepts(handler_call_details.invocation_metadata):
            return handler
        status = rpc_status.to_status(
            to_status(errors.UnauthenticatedError("a valid `authorization: Bearer <token>` header is required"))
        )

        async def refuse(request, context):
            await context.abort_with_status(status)

        async def refuse_stream(request, context):
            await context.abort_with_status(status)
            yield  # pragma: no cover - makes this an async generator, as streaming handlers must be

        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(refuse_stream, **kwargs)
        return grpc.unary_unary_rpc_method_handler(refuse, **kwargs)
