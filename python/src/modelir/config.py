"""The server's configuration: one YAML file mapping model names to transports, endpoints, credentials, limits.

Validated on load; every error names the file, the model and the field. Credentials are read from environment
variables named in the file and never appear in logs, errors, records or `ListModels`.

```yaml
server:
  auth_tokens_env: MODELIR_TOKENS      # optional: comma-separated bearer tokens; auth is on when set
limiter_backend: redis://127.0.0.1:6379/0  # optional: share every limit between replicas (limiter/settings.py)
limiters:                              # optional: limits shared by several models (e.g. one API key)
  openai-key: {max_concurrency: 64, requests_per_minute: 500, tokens_per_minute: 200000}
models:
  reference:
    transport: reference
  gpt-mini:
    transport: openai_chat
    base_url: https://api.openai.com/v1
    provider_model: gpt-4o-mini
    credential_env: OPENAI_API_KEY
    remove_capabilities: [TOOLS]       # narrow the manifest; never widen it
    limits: {max_concurrency: 8}       # or `limiter: openai-key`
    timeout_seconds: 120
    max_attempts: 4
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modelir.capabilities import narrow
from modelir.executor import Executor, RetryPolicy
from modelir.limiter import limiter_backend
from modelir.model import Model
from modelir.transports import TRANSPORTS, HttpTransport
from modelir.transports.reference import ReferenceModel
from modelir.v1 import capabilities_pb2

_MODEL_KEYS = {
    "transport",
    "base_url",
    "provider_model",
    "credential_env",
    "remove_capabilities",
    "limits",
    "limiter",
    "timeout_seconds",
    "max_attempts",
}


class ConfigError(ValueError):
    """A configuration problem, naming the file, the model and the field."""


@dataclass(slots=True)
class ServerConfig:
    models: dict[str, Model]
    auth_tokens: frozenset[str] = field(default_factory=frozenset)
    source: str = "<built-in>"

    async def aclose(self) -> None:
        closed = set()
        for model in self.models.values():
            if model.executor is not None and id(model.executor) not in closed:
                closed.add(id(model.executor))
                await model.executor.aclose()


def default_config() -> ServerConfig:
    """No file given: the built-in reference model, under the name `reference`."""
    return ServerConfig(models={"reference": Model(ReferenceModel(), name="reference")})


def load_config(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> ServerConfig:
    environ = os.environ if environ is None else environ
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    return build_config(data, source=source, environ=environ)


def build_config(data: Any, *, source: str, environ: Mapping[str, str]) -> ServerConfig:
    def fail(where: str, problem: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {problem}")

    if not isinstance(data, dict):
        raise fail("top level", "expected a mapping with a `models` key")
    unknown = set(data) - {"server", "limiter_backend", "limiters", "models"}
    if unknown:
        raise fail("top level", f"unknown keys {sorted(unknown)}; expected server, limiter_backend, limiters, models")

    server = data.get("server") or {}
    if not isinstance(server, dict) or set(server) - {"auth_tokens_env"}:
        raise fail("server", "only `auth_tokens_env` is accepted")
    tokens: frozenset[str] = frozenset()
    if "auth_tokens_env" in server:
        env = server["auth_tokens_env"]
        if env not in environ or not environ[env].strip():
            raise fail("server.auth_tokens_env", f"the environment variable {env} is not set")
        tokens = frozenset(t.strip() for t in environ[env].split(",") if t.strip())

    backend = limiter_backend(data.get("limiter_backend"), fail, environ)  # in memory, or Redis (limiter/settings.py)
    shared = {n: backend.build(spec, f"limiters.{n}", fail) for n, spec in (data.get("limiters") or {}).items()}

    models_spec = data.get("models")
    if not isinstance(models_spec, dict) or not models_spec:
        raise fail("models", "give at least one model")
    executors: dict[tuple[str, str], Executor] = {}
    models = {}
    for name, spec in models_spec.items():
        where = f"models.{name}"
        if not isinstance(spec, dict):
            raise fail(where, "expected a mapping")
        unknown = set(spec) - _MODEL_KEYS
        if unknown:
            raise fail(f"{where}.{sorted(unknown)[0]}", f"unknown field; expected one of {sorted(_MODEL_KEYS)}")
        transport_name = spec.get("transport")
        if transport_name not in TRANSPORTS:
            raise fail(f"{where}.transport", f"unknown transport {transport_name!r}; known: {sorted(TRANSPORTS)}")
        transport = TRANSPORTS[transport_name](spec)

        manifest = transport.manifest()
        if "remove_capabilities" in spec:
            remove = []
            for cap in spec["remove_capabilities"] or []:
                full = f"CAPABILITY_{str(cap).upper().removeprefix('CAPABILITY_')}"
                if full not in capabilities_pb2.Capability.keys():
                    raise fail(f"{where}.remove_capabilities", f"unknown capability {cap!r}")
                remove.append(capabilities_pb2.Capability.Value(full))
            manifest = narrow(manifest, remove)

        if "limiter" in spec and "limits" in spec:
            raise fail(f"{where}.limiter", "give either `limiter` (shared) or `limits` (own), not both")
        if "limiter" in spec:
            if spec["limiter"] not in shared:
                raise fail(f"{where}.limiter", f"no limiter named {spec['limiter']!r} under `limiters`")
            limiter = shared[spec["limiter"]]
        else:
            limiter = backend.build(spec.get("limits") or {}, f"{where}.limits", fail)

        timeout = spec.get("timeout_seconds")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise fail(f"{where}.timeout_seconds", "expected a positive number of seconds")

        executor = None
        if isinstance(transport, HttpTransport):
            base_url = spec.get("base_url")
            if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
                raise fail(f"{where}.base_url", "an http(s) URL is required for this transport")
            credential = ""
            if "credential_env" in spec:
                env = spec["credential_env"]
                credential = environ.get(env, "")
                if not credential:
                    raise fail(f"{where}.credential_env", f"the environment variable {env} is not set")
            attempts = spec.get("max_attempts", 4)
            if not isinstance(attempts, int) or attempts < 1:
                raise fail(f"{where}.max_attempts", "expected a whole number of at least 1")
            key = (base_url, spec.get("credential_env", ""))
            executor = executors.get(key)
            if executor is None:
                executor = executors[key] = Executor(
                    base_url, headers=transport.auth_headers(credential), retry=RetryPolicy(max_attempts=attempts)
                )
        elif "base_url" in spec or "credential_env" in spec:
            raise fail(where, f"transport {transport_name!r} runs in-process and takes no base_url or credential")
        models[name] = Model(
            transport, name=name, executor=executor, limiter=limiter, manifest=manifest, default_timeout=timeout
        )
    return ServerConfig(models=models, auth_tokens=tokens, source=source)
