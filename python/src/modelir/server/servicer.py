"""The `ModelService` servicer: resolve the model by name, call the `Model`, map errors through the one table.

It holds no logic of its own: everything a gRPC caller gets is what `Model` gives a library caller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
from grpc_status import rpc_status

from modelir import errors
from modelir.model import Model
from modelir.rich_status import to_status
from modelir.v1 import service_pb2, service_pb2_grpc

log = logging.getLogger("modelir.server")


class ModelServicer(service_pb2_grpc.ModelServiceServicer):
    def __init__(self, models: Mapping[str, Model]) -> None:
        self.models = dict(models)

    def _model(self, name: str) -> Model:
        try:
            return self.models[name]
        except KeyError:
            known = ", ".join(sorted(self.models)) or "none"
            raise errors.UnknownModelError(f"no model named {name!r} is configured (known: {known})") from None

    def _deadline(self, context: grpc.aio.ServicerContext) -> float | None:
        remaining = context.time_remaining()
        return None if remaining is None else time.monotonic() + remaining

    async def _abort(self, context, exc: errors.ModelError) -> None:
        await context.abort_with_status(rpc_status.to_status(to_status(exc)))

    async def _call(self, method: str, model_name: str, context, run: Callable[[Model], Awaitable[Any]]) -> Any:
        """Run one unary RPC on the named model: errors through the one table, one log line per call."""
        started = time.monotonic()
        transport, status = "-", "OK"
        try:
            model = self._model(model_name)
            transport = model.transport.name
            return await run(model)
        except errors.ModelError as exc:
            status = errors.mapping_for(exc.reason).grpc_code.name
            await self._abort(context, exc)
        except asyncio.CancelledError:
            status = "CANCELLED"
            raise
        finally:
            _log_call(method, model_name, transport, status, started)

    async def Generate(self, request: service_pb2.GenerateRequest, context) -> service_pb2.GenerateResponse:
        async def run(model: Model) -> service_pb2.GenerateResponse:
            response = await model.arun(request.request, deadline=self._deadline(context))
            return service_pb2.GenerateResponse(response=response)

        return await self._call("Generate", request.request.model, context, run)

    async def StreamGenerate(
        self, request: service_pb2.StreamGenerateRequest, context
    ) -> AsyncIterator[service_pb2.StreamGenerateResponse]:
        started = time.monotonic()
        model_name = request.request.model
        transport, status = "-", "OK"
        try:
            model = self._model(model_name)
            transport = model.transport.name
            async for event in model.astream(request.request, deadline=self._deadline(context)):
                yield service_pb2.StreamGenerateResponse(event=event)
        except errors.ModelError as exc:
            status = errors.mapping_for(exc.reason).grpc_code.name
            await self._abort(context, exc)
        except asyncio.CancelledError:
            status = "CANCELLED"
            raise
        finally:
            _log_call("StreamGenerate", model_name, transport, status, started)

    async def Tokenize(self, request: service_pb2.TokenizeRequest, context) -> service_pb2.TokenizeResponse:
        return await self._call("Tokenize", request.model, context, lambda model: model.atokenize_request(request))

    async def ListModels(self, request, context) -> service_pb2.ListModelsResponse:
        started = time.monotonic()
        listing = service_pb2.ListModelsResponse(
            models=[
                service_pb2.ModelInfo(name=name, manifest=model.capabilities)
                for name, model in sorted(self.models.items())
            ]
        )
        _log_call("ListModels", "-", "-", "OK", started)
        return listing

    async def Validate(self, request: service_pb2.ValidateRequest, context) -> service_pb2.ValidateResponse:
        return await self._call(
            "Validate", request.request.model, context, lambda model: model.avalidate(request.request)
        )


def _log_call(method: str, model: str, transport: str, status: str, started: float) -> None:
    log.info(
        "%s model=%s transport=%s status=%s latency_ms=%.1f",
        method,
        model,
        transport,
        status,
        (time.monotonic() - started) * 1e3,
    )
