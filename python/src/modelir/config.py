"""The server's configuration: one YAML file mapping model names to transports, endpoints, credentials, limits.

Validated on load; every error names the file, the model and the field. Credentials are read from environment
variables named in the file and never appear in logs, errors, records or `ListModels`.

```yaml
server:
  auth_tokens_env: MODELIR_TOKENS      # optional: comma-separated bearer tokens; auth is on when set
  tls: {cert_file: server.pem, key_file: server.key}  # optional: serve TLS (PEM files, relative to this file)
  max_message_bytes: 67108864          # optional: the largest gRPC message sent or received (default 64 MiB)
  max_concurrent_streams: 100          # optional: concurrent calls per client connection (default: grpc's own)
  media_uri_policy:                    # optional: which media URIs requests may carry (pipeline/media_policy.py)
    allow_schemes: [https, gs]         #   schemes forwarded (default: https and the providers' file/bucket ones)
    allow_private_hosts: false         #   loopback, link-local and private addresses (default: refused)
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
    timeout_seconds: 120               # the longest any call may take (default 600: model.DEFAULT_TIMEOUT)
    max_attempts: 4
  claude:
    transport: anthropic_messages
    base_url: https://api.anthropic.com/v1
    provider_model: claude-sonnet-4-0
    credential_env: ANTHROPIC_API_KEY
    default_max_tokens: 8192           # a transport option
  qwen:
    transport: sglang
    base_url: http://gpu:30000
    tokenizer_config: qwen/tokenizer_config.json  # the model's chat template, for conversations (relative to this
                                       # file; or `chat_template: "..."`, the template's text; needs jinja2)
```

A model entry holds the model fields above (`transport`, `base_url`, `credential_env`, `remove_capabilities`,
`limits` or `limiter`, `timeout_seconds`, `max_attempts`) and the options of its transport: the keyword arguments
of the transport's constructor (`modelir transports` lists them with their types and defaults). Every transport
takes `provider_model`, the model id at the provider; an HTTP transport without one sends the request's model
name. An option the transport does not take, a value of the wrong type, or one the transport refuses (a file it
cannot read, a template that does not compile) is an error naming the key. A relative path in an option that names
a file (sglang's `tokenizer_config`) is read from this file's directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.limiter import BaseLimiter, LimiterBackend, limiter_backend
from modelir.model import DEFAULT_TIMEOUT, Model
from modelir.pipeline.capabilities import narrow
from modelir.pipeline.media_policy import build_media_policy
from modelir.registry import TransportOptionError, registry
from modelir.transports.base import HttpTransport, Transport
from modelir.transports.reference import ReferenceModel
from modelir.v1 import capabilities_pb2

# The model fields; every other key of a model entry is an option of its transport.
_MODEL_KEYS = frozenset(
    {
        "transport",
        "base_url",
        "credential_env",
        "remove_capabilities",
        "limits",
        "limiter",
        "timeout_seconds",
        "max_attempts",
    }
)


class ConfigError(ValueError):
    """A configuration problem, naming the file, the model and the field."""


# A 32k-token response with top-20 logprobs (ids, text and bytes) is a few MiB; leave ample room.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# What makes two models share one executor (and its connections): base URL, credential, headers, attempts.
_ExecutorKey = tuple[str, str, tuple[tuple[str, str], ...], int]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The `server:` section beyond auth: TLS, gRPC limits. `tls_cert`/`tls_key` are PEM bytes, read on load."""

    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_concurrent_streams: int | None = None


@dataclass(slots=True)
class ServerConfig:
    models: dict[str, Model]
    auth_tokens: frozenset[str] = field(default_factory=frozenset)
    source: str = "<built-in>"
    server: ServerSettings = field(default_factory=ServerSettings)

    async def aclose(self) -> None:
        closed = set()
        for model in self.models.values():
            if model.executor is not None and id(model.executor) not in closed:
                closed.add(id(model.executor))
                await model.executor.aclose()


def default_config() -> ServerConfig:
    """No file given: the built-in reference model, under the name `reference`."""
    return ServerConfig(models={"reference": Model(ReferenceModel(), name="reference")})


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> ServerConfig:
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
    """Build the models a parsed configuration document describes (see the module's docstring)."""
    fail = _Failer(source)
    if not isinstance(data, dict):
        raise fail("top level", "expected a mapping with a `models` key")
    unknown = set(data) - {"server", "limiter_backend", "limiters", "models"}
    if unknown:
        raise fail("top level", f"unknown keys {sorted(unknown)}; expected server, limiter_backend, limiters, models")
    server_spec = data.get("server") or {}
    tokens = _auth_tokens(server_spec, environ, fail)
    settings = _server_settings(server_spec, Path(source).parent, fail)
    media_policy = build_media_policy(server_spec.get("media_uri_policy"), fail)
    backend = limiter_backend(data.get("limiter_backend"), fail, environ)  # in memory, or Redis (limiter/settings.py)
    shared = {n: backend.build(spec, f"limiters.{n}", fail) for n, spec in (data.get("limiters") or {}).items()}
    models_spec = data.get("models")
    if not isinstance(models_spec, dict) or not models_spec:
        raise fail("models", "give at least one model")
    executors: dict[_ExecutorKey, Executor] = {}
    models = {
        name: _model(name, spec, backend=backend, shared=shared, executors=executors, environ=environ, fail=fail)
        for name, spec in models_spec.items()
    }
    for model in models.values():
        model.media_policy = media_policy
    return ServerConfig(models=models, auth_tokens=tokens, source=source, server=settings)


class _Failer:
    """Makes the `ConfigError` for a problem at one place in one file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __call__(self, where: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {problem}")


_SERVER_KEYS = frozenset({"auth_tokens_env", "tls", "max_message_bytes", "max_concurrent_streams", "media_uri_policy"})


def _auth_tokens(server: Any, environ: Mapping[str, str], fail: _Failer) -> frozenset[str]:
    if not isinstance(server, dict) or set(server) - _SERVER_KEYS:
        raise fail("server", f"unknown keys; the server section takes {', '.join(sorted(_SERVER_KEYS))}")
    if "auth_tokens_env" not in server:
        return frozenset()
    env = server["auth_tokens_env"]
    if env not in environ or not environ[env].strip():
        raise fail("server.auth_tokens_env", f"the environment variable {env} is not set")
    return frozenset(t.strip() for t in environ[env].split(",") if t.strip())


def _server_settings(server: dict[str, Any], base: Path, fail: _Failer) -> ServerSettings:
    cert = key = None
    if "tls" in server:
        tls = server["tls"]
        if not isinstance(tls, dict) or set(tls) != {"cert_file", "key_file"}:
            raise fail("server.tls", "expected {cert_file: ..., key_file: ...} (PEM files)")
        cert, key = (_read_pem(base, tls[k], f"server.tls.{k}", fail) for k in ("cert_file", "key_file"))
    sizes = {}
    for name in ("max_message_bytes", "max_concurrent_streams"):
        value = server.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise fail(f"server.{name}", "expected a whole number of at least 1")
        sizes[name] = value
    return ServerSettings(
        tls_cert=cert,
        tls_key=key,
        max_message_bytes=sizes["max_message_bytes"] or DEFAULT_MAX_MESSAGE_BYTES,
        max_concurrent_streams=sizes["max_concurrent_streams"],
    )


def _read_pem(base: Path, name: Any, where: str, fail: _Failer) -> bytes:
    if not isinstance(name, str) or not name:
        raise fail(where, "expected the path of a PEM file")
    try:
        return (base / name).read_bytes()
    except OSError as exc:
        raise fail(where, f"cannot read {name}: {exc.strerror}") from None


def _model(
    name: str,
    spec: Any,
    *,
    backend: LimiterBackend,
    shared: Mapping[str, BaseLimiter],
    executors: dict[_ExecutorKey, Executor],
    environ: Mapping[str, str],
    fail: _Failer,
) -> Model:
    where = f"models.{name}"
    if not isinstance(spec, dict):
        raise fail(where, "expected a mapping")
    transport = _transport(spec, where, fail, Path(fail.source).parent)
    timeout = spec.get("timeout_seconds")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise fail(f"{where}.timeout_seconds", "expected a positive number of seconds")
    return Model(
        transport,
        name=name,
        executor=_executor(transport, spec, where, executors, environ, fail),
        limiter=_model_limiter(spec, where, backend, shared, fail),
        manifest=_manifest(transport, spec, where, fail),
        default_timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
    )


def _transport(spec: dict[str, Any], where: str, fail: _Failer, base: Path) -> Transport:
    """The transport the entry names, built from the entry's keys that are not model fields (a relative path in
    a path option, such as sglang's `tokenizer_config`, is read from `base`: this file's directory)."""
    name, entries = spec.get("transport"), registry()
    if not isinstance(name, str) or name not in entries:
        raise fail(f"{where}.transport", f"unknown transport {name!r}; known: {sorted(entries)}")
    entry = entries[name]
    options = {key: value for key, value in spec.items() if key not in _MODEL_KEYS}
    try:
        return entry.build(options, base)
    except TransportOptionError as exc:
        if exc.key not in entry.options:
            fields = ", ".join(sorted(_MODEL_KEYS))
            options_text = ", ".join(entry.options)
            raise fail(
                f"{where}.{exc.key}",
                f"unknown field; a model entry takes {fields} and the options of transport {entry.name!r}: "
                f"{options_text}",
            ) from None
        raise fail(f"{where}.{exc.key}", exc.problem) from None


def _manifest(
    transport: Transport, spec: dict[str, Any], where: str, fail: _Failer
) -> capabilities_pb2.CapabilityManifest:
    manifest = transport.manifest()
    if "remove_capabilities" not in spec:
        return manifest
    remove = []
    for cap in spec["remove_capabilities"] or []:
        full = f"CAPABILITY_{str(cap).upper().removeprefix('CAPABILITY_')}"
        if full not in capabilities_pb2.Capability.keys():
            raise fail(f"{where}.remove_capabilities", f"unknown capability {cap!r}")
        remove.append(capabilities_pb2.Capability.Value(full))
    return narrow(manifest, remove)


def _model_limiter(
    spec: dict[str, Any], where: str, backend: LimiterBackend, shared: Mapping[str, BaseLimiter], fail: _Failer
) -> BaseLimiter:
    if "limiter" in spec and "limits" in spec:
        raise fail(f"{where}.limiter", "give either `limiter` (shared) or `limits` (own), not both")
    if "limiter" not in spec:
        return backend.build(spec.get("limits") or {}, f"{where}.limits", fail)
    if spec["limiter"] not in shared:
        raise fail(f"{where}.limiter", f"no limiter named {spec['limiter']!r} under `limiters`")
    return shared[spec["limiter"]]


def _executor(
    transport: Transport,
    spec: dict[str, Any],
    where: str,
    executors: dict[_ExecutorKey, Executor],
    environ: Mapping[str, str],
    fail: _Failer,
) -> Executor | None:
    """The executor for an HTTP transport, shared by the models on the same endpoint with the same credential."""
    if not isinstance(transport, HttpTransport):
        if "base_url" in spec or "credential_env" in spec:
            raise fail(where, f"transport {transport.name!r} runs in-process and takes no base_url or credential")
        return None
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
    # Shared only by models that send the very same auth headers (scheme included: an Anthropic model on an OpenAI
    # model's URL and key sends `x-api-key`, not `Authorization: Bearer`) and retry the same way.
    headers = transport.auth_headers(credential)
    key = (base_url, spec.get("credential_env", ""), tuple(sorted(headers.items())), attempts)
    executor = executors.get(key)
    if executor is None:
        executor = executors[key] = Executor(base_url, headers=headers, retry=RetryPolicy(max_attempts=attempts))
    return executor
