"""The gRPC `ModelService` server: a thin servicer over the same `Model` a library user calls."""

from modelir.server.app import add_model_service, build_server, serve
from modelir.server.servicer import ModelServicer

__all__ = ["ModelServicer", "add_model_service", "build_server", "serve"]
