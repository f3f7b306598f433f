"""The `ModelService` servicer: resolve the model by name, call the `Model`, map errors through the one table.

It holds no logic of its own: everything a gRPC caller gets is what `Model` gives a library caller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Literal, TypeAlias, TypeVar

import grpc
from grpc_status import rpc_status

from modelir import errors, telemetry, version
from modelir.errors.rich_status import to_status
from modelir.model import Model
from modelir.records import varint
from modelir.streams.coalesce import coalesced_batches
from modelir.streams.fold import closing_stream
from modelir.v1 import (
    embedding_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    service_pb2_grpc,
    stream_pb2,
)

# Each RPC's context; the servicer only reads its deadline and hands it to telemetry and `abort_with_status`.
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
_Result = TypeVar("_Result")


class ModelServicer(service_pb2_grpc.ModelServiceServicer):
    def __init__(self, models: Mapping[str, Model], *, max_message_bytes: int | None = None) -> None:
        self.models = dict(models)
        self.max_message_bytes = max_message_bytes  # the server's send limit: a larger answer is refused typed

    def _model(self, name: str) -> Model:
        try:
            return self.models[name]
        except KeyError:
            known = ", ".join(sorted(self.models)) or "none"
            raise errors.UnknownModelError(f"no model named {name!r} is configured (known: {known})") from None

    def _deadline(self, context: _Context) -> float | None:
        remaining = context.time_remaining()
        return None if remaining is None else time.monotonic() + remaining

    async def _call(
        self,
        method: str,
        model_name: str,
        context: _Context,
        run: Callable[[Model], Awaitable[_Result]],
        request: request_pb2.Request | None = None,
    ) -> _Result:
        """Run one unary RPC on the named model (`request`: the one a generation RPC runs)."""
        async with _Call(self, method, model_name, context, request) as call:
            return call.answered(await run(call.model()))

    async def Generate(  # type: ignore[override]  # deliberately the wire bytes: see below
        self, request: service_pb2.GenerateRequest, context: _Context
    ) -> bytes:
        """Returns the wire bytes of `GenerateResponse(response=...)`, made by `serialize_generate_response`.

        Putting the `Response` into a `GenerateResponse` message would copy it, and for a logprob-heavy response
        that copy costs twice its serialisation (1.2 ms for 2,000 tokens x top-20; 16x that at 32k tokens). The
        bytes are made here, not by grpc after the call: an answer over the send limit is then refused (and logged)
        as what it is, `MessageTooLargeError`, instead of leaving grpc to fail a call already logged as OK.
        """
        inner = request.request  # read once: each read of a message field is a look-up in upb
        async with _Call(self, "Generate", inner.model, context, inner) as call:
            model = call.model()
            response = call.answered(await model.arun(inner, deadline=self._deadline(context)))
            wire = serialize_generate_response(response)
            if self.max_message_bytes is not None and len(wire) > self.max_message_bytes:
                raise errors.MessageTooLargeError(
                    f"the answer is {len(wire):,} bytes, more than the server's message limit of "
                    f"{self.max_message_bytes:,} (server.max_message_bytes); ask for less output or raise the limit"
                )
            return wire

    async def StreamGenerate(
        self, request: service_pb2.StreamGenerateRequest, context: _Context
    ) -> AsyncIterator[service_pb2.StreamGenerateResponse]:
        # Upstream deltas that wait together (the caller reads slower than the provider writes) leave as one
        # message: a gRPC message per token is most of what a stream costs the server.
        async with _Call(self, "StreamGenerate", request.request.model, context, request.request) as call:
            # In batches, as each read of the upstream brought them, with runs of plain text chunks lifted as one
            # delta: the coalescing would merge them anyway, and a chunk then costs no event of its own.
            batches = call.model().astream_batches(request.request, deadline=self._deadline(context), merge=True)
            events = coalesced_batches(batches)
            async with closing_stream(events):
                async for event in events:
                    call.observe(event)
                    yield service_pb2.StreamGenerateResponse(event=event)

    async def Tokenize(self, request: service_pb2.TokenizeRequest, context: _Context) -> service_pb2.TokenizeResponse:
        return await self._call("Tokenize", request.model, context, lambda model: model.atokenize_request(request))

    async def ListModels(
        self, request: service_pb2.ListModelsRequest, context: _Context
    ) -> service_pb2.ListModelsResponse:
        with telemetry.server_call("ListModels", "", context):
            names = sorted(self.models)
            tokenizers = await asyncio.gather(*(self.models[name].atokenizer_info() for name in names))
            manifests = await asyncio.gather(*(self.models[name].acapabilities() for name in names))
            return service_pb2.ListModelsResponse(
                models=[
                    service_pb2.ModelInfo(name=name, manifest=manifest, tokenizer=tokenizer)
                    for name, manifest, tokenizer in zip(names, manifests, tokenizers, strict=True)
                ]
            )

    async def Validate(self, request: service_pb2.ValidateRequest, context: _Context) -> service_pb2.ValidateResponse:
        return await self._call(
            "Validate", request.request.model, context, lambda model: model.avalidate(request.request)
        )

    async def Detokenize(
        self, request: service_pb2.DetokenizeRequest, context: _Context
    ) -> service_pb2.DetokenizeResponse:
        async def run(model: Model) -> service_pb2.DetokenizeResponse:  # ids it cannot have: refused in the call
            return service_pb2.DetokenizeResponse(text=await model.adetokenize(list(request.token_ids)))

        return await self._call("Detokenize", request.model, context, run)

    async def Embed(self, request: embedding_pb2.EmbedRequest, context: _Context) -> embedding_pb2.EmbedResponse:
        return await self._call("Embed", request.model, context, lambda model: model.aembed(request))

    async def GetServerInfo(
        self, request: service_pb2.GetServerInfoRequest, context: _Context
    ) -> service_pb2.GetServerInfoResponse:
        with telemetry.server_call("GetServerInfo", "", context):
            served: dict[str, service_pb2.TransportInfo] = {}
            for name, model in sorted(self.models.items()):
                manifest = model.capabilities
                info = served.setdefault(
                    manifest.transport,
                    service_pb2.TransportInfo(name=manifest.transport, version=manifest.transport_version),
                )
                info.model_names.append(name)
            return service_pb2.GetServerInfoResponse(
                ir_version=version.IR_VERSION,
                server_version=version.SDK_VERSION,
                transports=[served[name] for name in sorted(served)],
            )


class _Call:
    """The frame of one RPC: resolves the model, turns a `ModelError` into its rich status through the one table,
    and ends the RPC's span and access-log line with the status the caller sees (an unexpected exception reaches it
    as UNKNOWN; a stream whose caller stopped reading is CANCELLED)."""

    __slots__ = ("_context", "_model_name", "_rpc", "_servicer")

    def __init__(
        self,
        servicer: ModelServicer,
        method: str,
        model_name: str,
        context: _Context,
        request: request_pb2.Request | None = None,
    ) -> None:
        self._servicer, self._model_name, self._context = servicer, model_name, context
        self._rpc = telemetry.server_call(method, model_name, context, request)

    def model(self) -> Model:
        model = self._servicer._model(self._model_name)
        self._rpc.transport = model.transport.name
        return model

    def answered(self, result: _Result) -> _Result:
        self._rpc.answered(result)  # takes a `Response`'s usage (and returns the result as it is)
        return result

    def observe(self, event: stream_pb2.StreamEvent) -> None:
        self._rpc.observe(event)

    async def __aenter__(self) -> _Call:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> Literal[False]:  # never swallows the exception
        if exc is None:
            status = "OK"
        elif isinstance(exc, errors.ModelError):
            status = errors.mapping_for(exc.reason).grpc_code.name
        elif isinstance(exc, asyncio.CancelledError | GeneratorExit):  # the caller went away
            status = "CANCELLED"
        else:
            status = "UNKNOWN"
        self._rpc.status = status
        self._rpc.close()
        if isinstance(exc, errors.ModelError):
            await self._context.abort_with_status(rpc_status.to_status(to_status(exc)))
        return False


# `GenerateResponse` is `Response response = 1;`: on the wire, the tag of field 1 with the length-delimited wire
# type, the length as a varint, then the response's own bytes.
_RESPONSE_FIELD_TAG = bytes([1 << 3 | 2])


def serialize_generate_response(response: response_pb2.Response) -> bytes:
    """The wire bytes of `GenerateResponse(response=response)`, without building (and copying into) that message."""
    body = response.SerializeToString()
    return b"".join((_RESPONSE_FIELD_TAG, varint.encode(len(body)), body))
