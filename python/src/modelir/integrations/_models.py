"""Open the modelir model an integration was pointed at: by name in a configuration file, on a gRPC server, or
the built-in reference model."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from modelir.config import ServerConfig, default_config, load_config
from modelir.interface import ModelInterface
from modelir.remote import RemoteModel


@dataclass
class OpenedModel:
    """A model and what must be closed with it (the configuration's HTTP clients, or the gRPC channel)."""

    model: ModelInterface
    _config: ServerConfig | None = field(default=None, repr=False)
    # False for a model the caller built and passed in: the caller closes it.
    owned: bool = True

    async def aclose(self) -> None:
        if not self.owned:
            return
        if self._config is not None:
            await self._config.aclose()
        elif isinstance(self.model, RemoteModel):
            await self.model.aclose()


def open_model(
    name: str, *, config: str | None = None, target: str | None = None, token_env: str | None = None
) -> OpenedModel:
    """`name` from the file `config`, or served at the gRPC `target`, or (neither given) the built-in models.

    Call it from the event loop the model will run on: HTTP clients and gRPC channels belong to one loop.
    """
    if config and target:
        raise ValueError("give either a configuration file (config) or a gRPC target (target), not both")
    if target:
        token = None
        if token_env:
            token = os.environ.get(token_env)
            if not token:
                raise ValueError(f"token_env names {token_env!r}, which is not set in the environment")
        return OpenedModel(RemoteModel(target, name, token=token))
    if token_env:
        raise ValueError("token_env is for a gRPC target; a configuration file names its own credentials")
    loaded = load_config(config) if config else default_config()
    try:
        model = loaded.models[name]
    except KeyError:
        raise ValueError(
            f"no model {name!r} in {loaded.source}; it has: {', '.join(sorted(loaded.models)) or 'none'}"
        ) from None
    return OpenedModel(model, loaded)
