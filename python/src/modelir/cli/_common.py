"""What every command shares: the model a command names, files it reads and writes, one-line user errors."""

from __future__ import annotations

import argparse
import os
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

# Imported inside the functions that use them: a command's arguments are parsed before the SDK is loaded.
if TYPE_CHECKING:
    from modelir.config import ServerConfig
    from modelir.interface import ModelInterface


@cache
def capability_names() -> dict[int, str]:
    """`CAPABILITY_TOOLS` -> `TOOLS`, by number."""
    from modelir.v1 import capabilities_pb2

    return {v: k.removeprefix("CAPABILITY_") for k, v in capabilities_pb2.Capability.items()}


class UserError(Exception):
    """A mistake on the command line (a missing file, a bad value): one line on stderr, exit status 2."""


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (0 is refused, not read as 1)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def warn(message: str) -> None:
    print(f"modelir: warning: {message}", file=sys.stderr)


def add_where(sub: argparse.ArgumentParser) -> None:
    """`--config` or `--target`: which models a command talks to."""
    group = sub.add_mutually_exclusive_group()
    group.add_argument("--config", help="a YAML file of models (default: the built-in reference model)")
    group.add_argument(
        "--target",
        help="a modelir server host:port, replicas as IP:port,IP:port or dns:///name:port (token: $MODELIR_TOKEN)",
    )
    sub.add_argument(
        "--tls",
        nargs="?",
        const=True,
        default=False,
        metavar="CA_FILE",
        help="with --target: connect with TLS, trusting the system's roots or the CA certificates in CA_FILE",
    )
    sub.add_argument("--tls-server-name", help="with --tls: the name the server's certificate must carry")


class TlsKeywords(TypedDict, total=False):
    """`tls_of`'s answer: `tls` only when the command line gave `--tls` (`True`, or a CA bundle's path)."""

    tls: bool | str


def tls_of(args: argparse.Namespace) -> TlsKeywords:
    """The `RemoteModel` / `list_models` TLS keywords the command line asked for."""
    tls = getattr(args, "tls", False)
    if tls is not False and not getattr(args, "target", None):
        raise UserError("--tls goes with --target")
    if isinstance(tls, str):
        input_file(tls, "--tls")
    return {"tls": tls} if tls is not False else {}


def config(args: argparse.Namespace) -> ServerConfig:
    from modelir.config import default_config, load_config

    return load_config(args.config) if getattr(args, "config", None) else default_config()


async def open_model(args: argparse.Namespace) -> tuple[ModelInterface, ServerConfig | None]:
    """The model `--model` names: on the server at `--target`, or in the configuration (unknown: list the known)."""
    from modelir import errors

    tls = tls_of(args)
    if getattr(args, "target", None):
        from modelir.remote import RemoteModel

        remote = RemoteModel(
            args.target,
            args.model,
            token=os.environ.get("MODELIR_TOKEN"),
            tls_server_name=getattr(args, "tls_server_name", None),
            **tls,
        )
        return remote, None
    loaded = config(args)
    if args.model not in loaded.models:
        known = ", ".join(sorted(loaded.models))
        raise errors.UnknownModelError(f"no model named {args.model!r} in {loaded.source} (known: {known})")
    return loaded.models[args.model], loaded


def input_file(path: str, option: str) -> Path:
    """A file the command reads; a missing one is a user error naming the option."""
    file = Path(path)
    if not file.is_file():
        why = "is a directory" if file.is_dir() else "no such file"
        raise UserError(f"{option} {path}: {why}")
    return file


def output_file(path: str, option: str) -> Path:
    """A file the command writes; its directory must exist (we do not create directories behind the user's back)."""
    file = Path(path)
    parent = file.parent
    if not parent.is_dir():
        raise UserError(f"{option} {path}: the directory {str(parent)!r} does not exist")
    if file.is_dir():
        raise UserError(f"{option} {path}: is a directory")
    return file
