"""Building and running the grpc.aio server: the servicer, health, reflection, limits and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias, cast

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from modelir import errors
from modelir.config import DEFAULT_MAX_MESSAGE_BYTES, ConfigError, ServerSettings
from modelir.errors.rich_status import to_status
from modelir.model import Model
from modelir.server.auth import BearerAuthInterceptor
from modelir.server.servicer import ModelServicer
from modelir.v1 import errors_pb2, service_pb2, service_pb2_grpc

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["ModelService"].full_name

MAX_MESSAGE_BYTES = DEFAULT_MAX_MESSAGE_BYTES
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # grpc core fails calls CANCELLED, silently, past ~1,000 pending; queue bursts instead.
    ("grpc.server.max_pending_requests", 100_000),
    ("grpc.server.max_pending_requests_hard_limit", 100_000),
]


def server_options(settings: ServerSettings, *, reuse_port: bool = False) -> list[tuple[str, int]]:
    """The channel options for `settings`: message sizes both ways, concurrent streams per connection, and whether
    the port may be shared. grpc shares it by default (SO_REUSEPORT), so a second server on a busy port would start
    silently and take half its calls; only `modelir serve --workers` shares a port, on purpose."""
    options = dict(SERVER_OPTIONS)
    options["grpc.so_reuseport"] = int(reuse_port)
    options["grpc.max_send_message_length"] = settings.max_message_bytes
    options["grpc.max_receive_message_length"] = settings.max_message_bytes
    if settings.max_concurrent_streams is not None:
        options["grpc.max_concurrent_streams"] = settings.max_concurrent_streams
    return list(options.items())


async def build_server(
    models: Mapping[str, Model],
    address: str,
    *,
    auth_tokens: frozenset[str] = frozenset(),
    settings: ServerSettings | None = None,
    reuse_port: bool = False,
) -> tuple[grpc.aio.Server, int]:
    """A server bound to `address` (with TLS when `settings` has a certificate), not yet started; returns it with
    the bound port. A busy address is an `OSError`; a TLS key that does not match its certificate a `ConfigError`."""
    settings = settings or ServerSettings()
    interceptors = [BearerAuthInterceptor(auth_tokens)] if auth_tokens else []
    server = grpc.aio.server(options=server_options(settings, reuse_port=reuse_port), interceptors=interceptors)
    add_model_service(ModelServicer(models, max_message_bytes=settings.max_message_bytes), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ["", SERVICE_NAME, *models]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    try:
        if settings.tls_cert is not None and settings.tls_key is not None:
            check_tls_pair(settings.tls_cert, settings.tls_key)
            credentials = grpc.ssl_server_credentials([(settings.tls_key, settings.tls_cert)])
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # grpc's "Failed to bind to address", whatever the cause
        port = 0
    if port == 0:
        raise OSError(f"could not bind {address}: is another server listening on it?")
    return server, port


def check_tls_pair(cert: bytes, key: bytes) -> None:
    """Raise `ConfigError` when `key` is not the private key of `cert` (grpc would only say it cannot bind)."""
    with tempfile.TemporaryDirectory() as where:  # `ssl` reads a pair from files only
        cert_file, key_file = Path(where, "cert.pem"), Path(where, "key.pem")
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"server.tls: the key_file is not the private key of the cert_file, or either is not PEM ({exc.reason})"
            ) from None


def add_model_service(servicer: ModelServicer, server: grpc.aio.Server) -> None:
    """Register `ModelService`: the generated method handlers, with `Generate` answering the wire bytes its servicer
    method made (`serialize_generate_response`; see `ModelServicer.Generate`)."""
    captured = _CapturedHandlers()
    service_pb2_grpc.add_ModelServiceServicer_to_server(servicer, cast(grpc.aio.Server, captured))
    handlers = {name: _decoding_checked(handler) for name, handler in captured.handlers.items()}
    generate = handlers["Generate"]
    assert generate.unary_unary is not None
    handlers["Generate"] = grpc.unary_unary_rpc_method_handler(
        generate.unary_unary,
        request_deserializer=generate.request_deserializer,
        response_serializer=_as_is,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _as_is(wire: bytes) -> bytes:
    return wire


class _Undecodable:
    """What a request deserializer gives for bytes that are not the method's message (a string that is not UTF-8,
    a truncated or corrupt message, nesting past protobuf's limit): grpc would answer UNKNOWN for its exception."""

    __slots__ = ("error",)

    def __init__(self, error: DecodeError) -> None:
        self.error = error


# The handler of any method, each with its own message types: what the stubs' `add_registered_method_handlers` takes.
_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # a string: grpc's class is generic in its stubs only


def _decoding_checked(handler: _Handler) -> _Handler:
    """`handler`, answering INVALID_ARGUMENT (with a `BadRequest` naming the request) when the request's bytes do
    not decode, instead of letting grpc answer UNKNOWN."""
    decode = handler.request_deserializer
    if decode is None:
        return handler

    def tolerant(data: bytes) -> object:
        try:
            return decode(data)
        except DecodeError as exc:
            return _Undecodable(exc)

    async def refuse(undecodable: _Undecodable, context: grpc.aio.ServicerContext[object, object]) -> None:
        violation = errors_pb2.FieldViolation(
            field="request", description=f"The request's bytes are not a valid message: {undecodable.error}"
        )
        status = to_status(errors.InvalidRequestError([violation], "the request could not be decoded"))
        await context.abort_with_status(rpc_status.to_status(status))

    if handler.unary_unary is not None:
        unary: Any = handler.unary_unary  # typed for sync servers; this one is grpc.aio

        async def checked_unary(request: object, context: grpc.aio.ServicerContext[object, object]) -> object:
            if isinstance(request, _Undecodable):
                await refuse(request, context)
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked_unary, request_deserializer=tolerant, response_serializer=handler.response_serializer
        )
    if handler.unary_stream is not None:
        stream: Any = handler.unary_stream

        async def checked_stream(
            request: object, context: grpc.aio.ServicerContext[object, object]
        ) -> AsyncIterator[object]:
            # An async generator function itself: grpc tells a stream handler by its function, not what it returns.
            if isinstance(request, _Undecodable):
                await refuse(request, context)
            async with contextlib.aclosing(stream(request, context)) as answers:  # a caller gone closes it now
                async for answer in answers:
                    yield answer

        return grpc.unary_stream_rpc_method_handler(
            checked_stream, request_deserializer=tolerant, response_serializer=handler.response_serializer
        )
    return handler


class _CapturedHandlers:
    """Stands in for a server to take the method handlers the generated registration builds (the generated code
    stays the one source of every method's deserializer and serializer)."""

    handlers: dict[str, _Handler]

    def add_generic_rpc_handlers(self, generic_handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        pass

    def add_registered_method_handlers(self, service_name: str, handlers: dict[str, _Handler]) -> None:
        assert service_name == SERVICE_NAME
        self.handlers = handlers


def tune_gc() -> None:
    """Garbage-collector settings for a long-running server.

    Lifting a logprob-heavy response creates hundreds of thousands of short-lived objects; with the default
    gen-0 threshold (700) the cyclic collector runs over and over during one lift and can double its cost.
    Freezing everything allocated at start-up and raising the gen-0 threshold removes most of that work.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


async def serve(
    models: Mapping[str, Model],
    host: str,
    port: int,
    *,
    auth_tokens: frozenset[str] = frozenset(),
    grace: float = 30.0,
    settings: ServerSettings | None = None,
    ready: Callable[[int], None] | None = None,
    reuse_port: bool = False,
) -> None:
    """Serve until SIGTERM or SIGINT, then stop taking calls and drain those in flight for `grace` seconds.
    `ready` is called with the bound port once the server takes calls (`modelir serve --workers`)."""
    server, bound = await build_server(
        models, f"{host}:{port}", auth_tokens=auth_tokens, settings=settings, reuse_port=reuse_port
    )
    tune_gc()
    await server.start()
    logging.getLogger("modelir.server").info("modelir serving %s on %s:%d", ", ".join(sorted(models)), host, bound)
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("modelir.server").info("shutting down: draining in-flight calls")
    await server.stop(grace)
