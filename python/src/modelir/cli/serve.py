"""`modelir serve`: the gRPC ModelService over the configured models."""

from __future__ import annotations

import argparse
import asyncio
import os

from modelir.cli._common import config
from modelir.config import ConfigError
from modelir.telemetry import setup


def _serve(args: argparse.Namespace) -> int:
    from modelir.server import serve
    from modelir.telemetry import access_log

    loaded = config(args)
    try:
        access_log.configure(args.access_log)
    except ValueError as exc:  # a bad $MODELIR_ACCESS_LOG (argparse checks only the flag)
        raise ConfigError(f"MODELIR_ACCESS_LOG: {exc}") from None
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    # Traces and metrics only when OTEL_* variables ask for them; what is still batched is exported at the end.

    async def serve_then_close() -> None:
        try:
            await serve(
                loaded.models,
                args.host,
                args.port,
                auth_tokens=loaded.auth_tokens,
                grace=args.grace,
                settings=loaded.server,  # TLS and gRPC limits from the configuration
            )
        finally:
            await loaded.aclose()  # the models' HTTP sessions, so shutdown ends without "Unclosed client session"

    with setup.installed_from_env(default_sampler_ratio=setup.SERVER_SAMPLER_RATIO):
        try:
            asyncio.run(serve_then_close())
        finally:
            access_log.access_log().flush()
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="run the gRPC ModelService")
    serve.add_argument("--config", help="a YAML file of models (default: the built-in reference model)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=50051, help="the port (default: 50051; 0 picks a free one, logged)")
    serve.add_argument("--grace", type=float, default=30.0, help="seconds to drain in-flight calls on SIGTERM")
    serve.add_argument(
        "--access-log",
        choices=["text", "json", "off"],
        default=os.environ.get("MODELIR_ACCESS_LOG", "text"),
        help="one line per call on stderr: text, JSON lines, or off (default $MODELIR_ACCESS_LOG or text)",
    )
    serve.set_defaults(func=_serve)
