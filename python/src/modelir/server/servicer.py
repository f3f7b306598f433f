"""The `ModelService` servicer: resolve the model by name, call the `Model`, map errors through the one table.

It holds no logic of its own: everything a gRPC caller gets is what `Model` gives a library caller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping

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

    async def Generate(self, request: service_pb2.GenerateRequest, context) -> service_pb2.GenerateResponse:
        started = time.monotonic()
        model_name = request.request.model
        try:
            model = self._model(model_name)
            response = await model.arun(request.request, deadline=self._deadline(context))
        except errors.ModelError as exc:
            _log_call("Generate", model_name, exc, started)
            await self._abort(context, exc)
        _log_call("Generate", model_name, None, started)
        return service_pb2.GenerateResponse(response=response)

    async def StreamGenerate(
        self, request: service_pb2.StreamGenerateRequest, context
    ) -> AsyncIterator[service_pb2.StreamGenerateResponse]:
        started = time.monotonic()
        model_name = request.request.model
        try:
            model = self._model(model_name)
            async for event in model.astream(request.request, deadline=self._deadline(context)):
                yield service_pb2.StreamGenerateResponse(event=event)
        except errors.ModelError as exc:
            _log_call("StreamGenerate", model_name, exc, started)
            await self._abort(context, exc)
        _log_call("StreamGenerate", model_name, None, started)

    async def Tokenize(self, request: service_pb2.TokenizeRequest, context) -> service_pb2.TokenizeResponse:
        started = time.monotonic()
        try:
            result = await self._model(request.model).atokenize_request(request)
        except errors.ModelError as exc:
            _log_call("Tokenize", request.model, exc, started)
            await self._abort(context, exc)
        _log_call("Tokenize", request.model, None, started)
        return result

    async def ListModels(self, request, context) -> service_pb2.ListModelsResponse:
        return service_pb2.ListModelsResponse(
            models=[
                service_pb2.ModelInfo(name=name, manifest=model.capabilities)
                for name, model in sorted(self.models.items())
            ]
        )

    async def Validate(self, request: service_pb2.ValidateRequest, context) -> service_pb2.ValidateResponse:
        try:
            return await self._model(request.request.model).avalidate(request.request)
        except errors.ModelError as exc:
            await self._abort(context, exc)


def _log_call(method: str, model: str, exc: errors.ModelError | None, started: float) -> None:
    status = "OK" if exc is None else errors.mapping_for(exc.reason).grpc_code.name
    log.info("%s model=%s status=%s latency_ms=%.1f", method, model, status, (time.monotonic() - started) * 1e3)
