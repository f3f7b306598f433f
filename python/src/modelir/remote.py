"""`RemoteModel`: the `Model` interface over a gRPC channel to one modelir server or a fleet of replicas.

Code written against `Model` runs unchanged against `RemoteModel`: the same methods, the same sugar, and the same
exceptions (rebuilt from the server's rich status). A grpc.aio channel belongs to one event loop, so the model
keeps one channel per loop: the caller's for the async methods, the private one for the sync twins.

A fleet is several targets (`"10.0.0.1:50051,10.0.0.2:50051"` or a list) or a DNS name that resolves to several
addresses (`"dns:///modelir.internal:50051"`). The channel balances calls with gRPC's client-side `round_robin`
and health-checks every replica (`grpc.health.v1`, service `modelir.v1.ModelService`), so a replica that stops
serving, drains or dies leaves the rotation; a single `host:port` is not health-checked (nothing to route around,
and a call must not depend on a health service that an instrumentation may break). A unary call that fails
because its replica went away (UNAVAILABLE or CANCELLED with no modelir error attached: no server answered it) is
sent again to another replica, up to
`failover_attempts` times in all; a modelir error the server did answer (its provider was unavailable, say)
is never resent from here, since the server has already retried it upstream.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import grpc

from modelir import errors, sync, telemetry
from modelir.errors.rich_status import error_from_rpc
from modelir.interface import ModelInterface
from modelir.pipeline import capabilities, validation
from modelir.streams.fold import keeping_partial
from modelir.sync import run_sync as _sync
from modelir.v1 import (
    capabilities_pb2,
    embedding_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    service_pb2_grpc,
    stream_pb2,
)
from modelir.version import IR_SEMVER, check_compatible, parse_semver
from modelir.writing.arguments import ArgumentError, require_request

if TYPE_CHECKING:  # the limiter package loads every transport (its feedback reads their retry hints)
    from modelir.limiter import BaseLimiter

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["ModelService"].full_name
# round_robin over every resolved address, each one health-checked (the server reports `ModelService` SERVING).
SERVICE_CONFIG = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": SERVICE_NAME}}
)
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.service_config", SERVICE_CONFIG),
    ("grpc.enable_retries", 1),  # transparent retries of calls that never reached a replica
]
# One `host:port`: no replica to route around, so no health checks, and a server whose health service fails (an
# instrumentation that breaks its `Watch` stream, say) is still called rather than reported unavailable.
ONE_REPLICA_OPTIONS = [
    *(option for option in CHANNEL_OPTIONS if option[0] != "grpc.service_config"),
    ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
]
_T = TypeVar("_T")


def channel_target(target: str | Sequence[str]) -> str:
    """The gRPC target for one `host:port`, a comma-separated list or sequence of IP `host:port`s, or a
    `dns:///name:port` (or any other gRPC URI) that may resolve to several replicas."""
    targets = [t.strip() for t in (target.split(",") if isinstance(target, str) else target) if t.strip()]
    if not targets:
        raise ValueError("no target given: expected host:port, several IP:port separated by commas, or dns:///name")
    if len(targets) == 1:
        return targets[0]
    families = set()
    for one in targets:
        host, _, port = one.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        try:
            families.add(ipaddress.ip_address(host).version)
        except ValueError:
            raise ValueError(
                f"target {one!r}: several targets must be IP:port (for a name that resolves to several replicas "
                "give one dns:///name:port)"
            ) from None
        if not port.isdigit():
            raise ValueError(f"target {one!r}: expected IP:port")
    if len(families) > 1:
        raise ValueError(f"targets {targets}: mix IPv4 and IPv6 addresses in two models, not one")
    return ("ipv4:" if families == {4} else "ipv6:") + ",".join(targets)


def open_channel(
    target: str | Sequence[str], *, tls: bool | str | bytes = False, server_name: str | None = None
) -> grpc.aio.Channel:
    """A channel to `target`. `tls`: False (plain), True (TLS, the system's roots), or the CA certificates to trust
    (a PEM file's path, or PEM bytes); `server_name` is the name the certificate must carry when it is not the
    target's host (e.g. a certificate for `models.internal` served on an IP address)."""
    resolved = channel_target(target)
    fleet = "," in resolved or resolved.startswith("dns:")  # several replicas, or a name that may resolve to several
    options = CHANNEL_OPTIONS if fleet else ONE_REPLICA_OPTIONS
    if tls is False:
        return grpc.aio.insecure_channel(resolved, options=options)
    roots = None if tls is True else tls if isinstance(tls, bytes) else Path(tls).read_bytes()
    options = [*options, *((("grpc.ssl_target_name_override", server_name),) if server_name else ())]
    return grpc.aio.secure_channel(resolved, grpc.ssl_channel_credentials(root_certificates=roots), options=options)


def _replica_went_away(exc: grpc.aio.AioRpcError) -> bool:
    """UNAVAILABLE or CANCELLED that no modelir server produced: the connection broke, the replica was gone, or
    it was shutting down (a draining gRPC server cancels the calls that reach it after it stopped taking new
    ones). A modelir error always carries its ErrorInfo; a cancellation by this client raises no RPC error."""
    if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return False
    return not any(key == "grpc-status-details-bin" for key, _ in exc.trailing_metadata() or ())


class RemoteModel(ModelInterface):
    def __init__(
        self,
        target: str | Sequence[str],
        model: str,
        *,
        token: str | None = None,
        failover_attempts: int = 3,
        tls: bool | str | bytes = False,
        tls_server_name: str | None = None,
        max_concurrency: int | None = None,
        limiter: BaseLimiter | None = None,
    ) -> None:
        """A model served at `target` (see `channel_target`). `max_concurrency` caps this client's calls in flight
        (as `connect(..., max_concurrency=)` does); `limiter` shares one cap between several models instead."""
        if limiter is not None and max_concurrency is not None:
            raise ArgumentError("limiter", "either a shared limiter or max_concurrency, not both")
        if max_concurrency is not None and (isinstance(max_concurrency, bool) or max_concurrency < 1):
            raise ArgumentError("max_concurrency", "a whole number of at least 1", max_concurrency)
        if limiter is None and max_concurrency is not None:
            from modelir.limiter import Limiter

            limiter = Limiter(max_concurrency=max_concurrency)
        self.limiter: BaseLimiter | None = limiter  # None: no cap of this client's own
        self.target = target if isinstance(target, str) else ",".join(target)
        self._channel_target = channel_target(target)  # fails here, not on the first call
        self.failover_attempts = max(1, failover_attempts)
        self.failovers = 0  # calls sent again after their replica went away
        self.name = model
        self._targets, self._tls, self._tls_server_name = target, tls, tls_server_name  # see `open_channel`
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        # mypy-protobuf types a stub made on an aio channel as `ModelServiceAsyncStub` (a stub-only name).
        self._stubs: dict[
            asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, service_pb2_grpc.ModelServiceAsyncStub]
        ] = {}
        self._manifest: capabilities_pb2.CapabilityManifest | None = None
        self._server_checked = False  # the server's IR major was found compatible (`_check_server`)
        self._server_is_older = False  # the server speaks an older minor IR: it cannot see newer request fields

    def __repr__(self) -> str:
        return f"RemoteModel({self.target!r}, {self.name!r})"  # never the token

    def _stub(self) -> service_pb2_grpc.ModelServiceAsyncStub:
        loop = asyncio.get_running_loop()
        entry = self._stubs.get(loop)
        if entry is None:
            channel = open_channel(self._targets, tls=self._tls, server_name=self._tls_server_name)
            entry = self._stubs[loop] = (channel, service_pb2_grpc.ModelServiceStub(channel))
        return entry[1]

    # ---- lifecycle: as a `Connection`'s ------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the channel opened on the running loop."""
        entry = self._stubs.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[0].close()

    def close(self) -> None:
        """Close the channel the sync methods opened (async code uses `aclose`)."""
        if sync._loop is not None and sync._loop in self._stubs:
            _sync(self.aclose())

    async def __aenter__(self) -> RemoteModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> RemoteModel:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _timeout(self, request: request_pb2.Request | None, deadline: float | None) -> float | None:
        candidates = []
        if deadline is not None:
            candidates.append(deadline - time.monotonic())
        if request is not None and request.HasField("timeout"):
            candidates.append(request.timeout.ToTimedelta().total_seconds())
        return max(0.0, min(candidates)) if candidates else None

    async def _check_server(self) -> None:
        """Before the first call: ask the server its IR version and refuse another major (`IncompatibleServerError`),
        as every client in `clients/` does on connect. Once per model: a fleet's replicas serve one release."""
        if self._server_checked:
            return
        info = await self.aserver_info()
        check_compatible(info.ir_version)
        self._server_is_older = parse_semver(info.ir_version).minor < IR_SEMVER.minor
        self._server_checked = True

    async def _check_needs(self, request: request_pb2.Request, *, streaming: bool) -> None:
        """Against a server of an older minor IR, check the request's needs here, with this SDK's catalog: the
        server would drop a newer field unseen (proto3 keeps no unknown fields in its checks), but its manifest
        lacks the capability that field needs, so the request is refused before it is sent."""
        await self._check_server()
        if not self._server_is_older:
            return
        gaps = capabilities.unsupported(request, await self.acapabilities(), model=self.name, streaming=streaming)
        if gaps is not None:
            raise errors.UnsupportedCapabilityError(gaps)

    async def _unary(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Make one unary call (after the IR check), sending it again (to another replica) when its replica went
        away."""
        await self._check_server()
        return await self._unary_unchecked(call)

    async def _unary_unchecked(self, call: Callable[[], Awaitable[_T]]) -> _T:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except grpc.aio.AioRpcError as exc:
                if attempt >= self.failover_attempts or not _replica_went_away(exc):
                    raise error_from_rpc(exc) from None
                self.failovers += 1

    def _named(self, request: request_pb2.Request) -> request_pb2.Request:
        return validation.named_for(request, self.name)  # refuses another model's name, as a local Model does

    # ---- the primitives ------------------------------------------------------------------------------

    async def acapabilities(self) -> capabilities_pb2.CapabilityManifest:
        """Fetch (once) this model's manifest from `ListModels`."""
        if self._manifest is None:
            listing = await self._unary(
                lambda: self._stub().ListModels(
                    service_pb2.ListModelsRequest(), metadata=telemetry.outgoing_metadata(self._metadata)
                )
            )
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
        """Run one request on the server (see `ModelInterface.arun`)."""
        request = require_request(request, "arun")
        with telemetry.model_call(self, request) as call:
            return call.finish(await self._arun(request, deadline))

    async def _arun(self, request: request_pb2.Request, deadline: float | None) -> response_pb2.Response:
        request = self._named(request)
        await self._check_needs(request, streaming=False)
        message = service_pb2.GenerateRequest(request=request)

        async def generate() -> service_pb2.GenerateResponse:
            call = self._stub().Generate(
                message, timeout=self._timeout(request, deadline), metadata=telemetry.outgoing_metadata(self._metadata)
            )
            answer = await call
            await telemetry.read_trailers(call)  # the provider's request id, for a record's provenance
            return answer

        if self.limiter is None:
            return (await self._unary(generate)).response
        async with self.limiter.acquire():
            answer = await self._unary(generate)
        return answer.response

    def astream(
        self, request: request_pb2.Request, *, deadline: float | None = None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        """Stream the events of one request from the server (see `ModelInterface.astream`)."""
        request = require_request(request, "astream")
        return telemetry.stream_call(self, request, keeping_partial(self._astream(request, deadline)))

    async def _astream(
        self, request: request_pb2.Request, deadline: float | None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        """Sent again to another replica only if its replica went away before the first event (once output has
        arrived, a broken stream raises like any other)."""
        request = self._named(request)
        await self._check_needs(request, streaming=True)
        message = service_pb2.StreamGenerateRequest(request=request)
        if self.limiter is None:
            async for event in self._stream_calls(request, message, deadline):
                yield event
            return
        async with self.limiter.acquire():  # held for the whole stream, as a local model holds its slot
            async for event in self._stream_calls(request, message, deadline):
                yield event

    async def _stream_calls(
        self, request: request_pb2.Request, message: service_pb2.StreamGenerateRequest, deadline: float | None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        await self._check_server()
        attempt = 0
        while True:
            attempt += 1
            delivered = False
            call = self._stub().StreamGenerate(
                message,
                timeout=self._timeout(request, deadline),
                metadata=telemetry.outgoing_metadata(self._metadata),
            )
            try:
                async for answer in call:
                    delivered = True
                    yield answer.event
                await telemetry.read_trailers(call)
                return
            except grpc.aio.AioRpcError as exc:
                if delivered or attempt >= self.failover_attempts or not _replica_went_away(exc):
                    raise error_from_rpc(exc) from None
                self.failovers += 1
            finally:
                call.cancel()  # a consumer that stops early cancels the server-side call, and with it the upstream

    async def avalidate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        """Check `request` against the served model without running it."""
        request = require_request(request, "avalidate")
        mismatch = validation.model_mismatch(request, self.name)
        if mismatch is not None:  # the verdict a local Model gives, without asking a server about another model
            return service_pb2.ValidateResponse(field_violations=[mismatch])
        message = service_pb2.ValidateRequest(request=self._named(request))
        return await self._unary(
            lambda: self._stub().Validate(message, metadata=telemetry.outgoing_metadata(self._metadata))
        )

    async def atokenize_request(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse:
        if not request.model:
            request.model = self.name
        return await self._unary(
            lambda: self._stub().Tokenize(request, metadata=telemetry.outgoing_metadata(self._metadata))
        )

    async def adetokenize(self, token_ids: list[int]) -> str:
        """Token ids back to text, with the model's own tokenizer (as `Model.adetokenize`)."""
        message = service_pb2.DetokenizeRequest(model=self.name, token_ids=token_ids)
        answer = await self._unary(
            lambda: self._stub().Detokenize(message, metadata=telemetry.outgoing_metadata(self._metadata))
        )
        return answer.text

    async def around_trip(self, text: str) -> bool:
        """Whether detokenize(tokenize(text)) gives `text` back (as `Model.around_trip`)."""
        tokens = await self.atokenize(text)
        return await self.adetokenize(list(tokens.token_ids)) == text

    async def aembed(
        self, request: embedding_pb2.EmbedRequest, *, deadline: float | None = None
    ) -> embedding_pb2.EmbedResponse:
        """Turn inputs into vectors on the server (`Model.aembed`), under `deadline` (monotonic) when given; a server
        of IR 1.0 has no `Embed`. The caller's request is not changed: a copy names this model when it names none."""
        if not request.model:
            named = embedding_pb2.EmbedRequest()
            named.CopyFrom(request)
            named.model = self.name
            request = named
        timeout = self._timeout(None, deadline)
        return await self._unary(
            lambda: self._stub().Embed(request, timeout=timeout, metadata=telemetry.outgoing_metadata(self._metadata))
        )

    async def aserver_info(self) -> service_pb2.GetServerInfoResponse:
        """The server's IR version, its own version and the transports it serves."""
        message = service_pb2.GetServerInfoRequest()
        return await self._unary_unchecked(
            lambda: self._stub().GetServerInfo(message, metadata=telemetry.outgoing_metadata(self._metadata))
        )


async def list_models(
    target: str | Sequence[str], *, token: str | None = None, tls: bool | str | bytes = False
) -> list[tuple[str, capabilities_pb2.CapabilityManifest]]:
    """The models a server (or any one replica of a fleet) serves, with their manifests, sorted by name."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with open_channel(target, tls=tls) as channel:
        try:
            listing = await service_pb2_grpc.ModelServiceStub(channel).ListModels(
                service_pb2.ListModelsRequest(), metadata=metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
    return [(m.name, m.manifest) for m in listing.models]
