"""How a worker process opens the same model as the driver: a configuration's text and a model name, or a
server target (one replica, several, or a DNS name) and a model name. Plain data, so it can travel to Ray workers.

Credentials never travel: the configuration names environment variables, and the worker reads them from its own
environment (a local Ray cluster inherits the driver's; on a remote cluster, set them on the nodes or in the
job's `runtime_env`). A server token is read from `$MODELIR_TOKEN` the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from modelir import errors
from modelir.interface import ModelInterface


@dataclass(frozen=True, slots=True)
class ModelSpec:
    model: str
    config_text: str | None = None
    config_source: str = "<built-in>"
    target: str | None = None

    @classmethod
    def from_config_file(cls, path: str | os.PathLike[str], model: str) -> ModelSpec:
        return cls(model=model, config_text=Path(path).read_text(), config_source=str(path))

    def open(self) -> ModelInterface:
        if self.target:
            from modelir.remote import RemoteModel

            return RemoteModel(self.target, self.model, token=os.environ.get("MODELIR_TOKEN"))
        from modelir.config import build_config, default_config

        if self.config_text is None:
            config = default_config()
        else:
            config = build_config(yaml.safe_load(self.config_text), source=self.config_source, environ=os.environ)
        if self.model not in config.models:
            raise errors.UnknownModelError(f"no model named {self.model!r} in {config.source}")
        return config.models[self.model]
