"""`RemoteModel`: the `Model` interface over a gRPC channel to a modelir server.

Code written against `Model` runs unchanged against `RemoteModel`: the same methods, the same sugar, and the same
exceptions (rebuilt from the server's rich status). A grpc.aio channel belongs to one event loop, so the model
keeps one channel per loop: the caller's for the async methods, the private one for the sync twins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc

from modelir import errors, telemetry
from modelir.interface import ModelInterface, _sync, with_model
from modelir.rich_status import error_from_rpc
from modelir.v1 import capabilities_pb2, request_pb2, response_pb2, service_pb2, service_pb2_grpc, stream_pb2

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


class RemoteModel(ModelInterface):
    def __init__(self, target: str, model: str, *, token: str | None = None) -> None:
        self.target = target
        self.name = model
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._stubs: dict[asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, service_pb2_grpc.ModelServiceStub]] = {}
        self._manifest: capabilities_pb2.CapabilityManifest | None = None

    def __repr__(self) -> str:
        return f"RemoteModel({self.target!r}, {self.name!r})"  # never the token

    def _stub(self) -> service_pb2_grpc.ModelServiceStub:
        loop = asyncio.get_running_loop()
        entry = self._stubs.get(loop)
        if entry is None:
            channel = grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)
            entry = self._stubs[loop] = (channel, service_pb2_grpc.ModelServiceStub(channel))
        return entry[1]

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._stubs.pop(loop, None)
        if entry is not None:
            await entry[0].close()

    def _timeout(self, request: request_pb2.Request | None, deadline: float | None) -> float | None:
        candidates = []
        if deadline is not None:
            candidates.append(deadline - time.monotonic())
        if request is not None and request.HasField("timeout"):
            candidates.append(request.timeout.ToTimedelta().total_seconds())
        return max(0.0, min(candidates)) if candidates else None

    def _named(self, request: request_pb2.Request) -> request_pb2.Request:
        return request if request.model else with_model(request, self.name)

    # ---- the primitives ------------------------------------------------------------------------------

    async def acapabilities(self) -> capabilities_pb2.CapabilityManifest:
        """Fetch (once) this model's manifest from `ListModels`."""
        if self._manifest is None:
            try:
                listing = await self._stub().ListModels(service_pb2.ListModelsRequest(), metadata=self._metadata)
            except grpc.aio.AioRpcError as exc:
                raise error_from_rpc(exc) from None
            for info in listing.models:
                if info.name == self.name:
                    self._manifest = info.manifest
                    break
            else:
                raise errors.UnknownModelError(f"the server at {self.target} serves no model named {self.name!r}")
        return self._manifest

    @property
    def capabilities(self) -> capabilities_pb2.CapabilityManifest:
        if self._manifest is None:
            self._manifest = _sync(self.acapabilities())
        return self._manifest

    async def arun(self, request: request_pb2.Request, *, deadline: float | None = None) -> response_pb2.Response:
        with telemetry.model_call(self, request) as call:
            return call.finish(await self._arun(request, deadline))

    async def _arun(self, request: request_pb2.Request, deadline: float | None) -> response_pb2.Response:
        request = self._named(request)
        try:
            call = self._stub().Generate(
                service_pb2.GenerateRequest(request=request),
                timeout=self._timeout(request, deadline),
                metadata=telemetry.outgoing_metadata(self._metadata),
            )
            answer = await call
            await telemetry.read_trailers(call)  # the provider's request id, for a record's provenance
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
        return answer.response

    def astream(
        self, request: request_pb2.Request, *, deadline: float | None = None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        return telemetry.stream_call(self, request, self._astream(request, deadline))

    async def _astream(
        self, request: request_pb2.Request, deadline: float | None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        request = self._named(request)
        call = self._stub().StreamGenerate(
            service_pb2.StreamGenerateRequest(request=request),
            timeout=self._timeout(request, deadline),
            metadata=telemetry.outgoing_metadata(self._metadata),
        )
        try:
            async for message in call:
                yield message.event
            await telemetry.read_trailers(call)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
        finally:
            call.cancel()  # a consumer that stops early cancels the server-side call, and with it the upstream

    async def avalidate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        try:
            return await self._stub().Validate(
                service_pb2.ValidateRequest(request=self._named(request)), metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    async def atokenize_request(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse:
        if not request.model:
            request.model = self.name
        try:
            return await self._stub().Tokenize(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    # ---- added with the Detokenize and GetServerInfo RPCs ----------------------------------------------

    async def adetokenize(self, token_ids: list[int]) -> str:
        """Token ids back to text, with the model's own tokenizer (as `Model.adetokenize`)."""
        try:
            answer = await self._stub().Detokenize(
                service_pb2.DetokenizeRequest(model=self.name, token_ids=token_ids), metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
        return answer.text

    async def around_trip(self, text: str) -> bool:
        """Whether detokenize(tokenize(text)) gives `text` back (as `Model.around_trip`)."""
        tokens = await self.atokenize(text)
        return await self.adetokenize(list(tokens.token_ids)) == text

    async def aserver_info(self) -> service_pb2.GetServerInfoResponse:
        """The server's IR version, its own version and the transports it serves."""
        try:
            return await self._stub().GetServerInfo(service_pb2.GetServerInfoRequest(), metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None


async def list_models(
    target: str, *, token: str | None = None
) -> list[tuple[str, capabilities_pb2.CapabilityManifest]]:
    """The models a server serves, with their manifests, sorted by name."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        try:
            listing = await service_pb2_grpc.ModelServiceStub(channel).ListModels(
                service_pb2.ListModelsRequest(), metadata=metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
    return [(m.name, m.manifest) for m in listing.models]
