"""The `modelir` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from modelir.model import Model
from modelir.transports.reference import ReferenceModel


def _serve(args: argparse.Namespace) -> int:
    from modelir.server import serve

    if args.config:
        print(
            "modelir serve: configuration files arrive with the server issue; run without --config "
            "to serve the reference model",
            file=sys.stderr,
        )
        return 2
    models = {"reference": Model(ReferenceModel(), name="reference")}
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(models, args.host, args.port))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="modelir", description="modelir: a versioned IR for language models")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gRPC ModelService")
    serve.add_argument("--config", help="a YAML file of models (default: the built-in reference model)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051)
    serve.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
