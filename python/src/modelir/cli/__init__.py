"""The `modelir` command line: the parser, and the one place a user's mistake becomes one line instead of a traceback.

One module per command group: `serve`, `listing` (models, transports, check), `calls` (validate, generate,
classify), `run`, `records`, `conformance`. Each adds its subcommands with `add(commands)`; a command is `func`
(sync) or `afunc` (a coroutine run here), and may give `on_interrupt` to say what Ctrl-C left behind.

Nothing heavy is imported before the arguments are parsed: the command modules import the SDK, gRPC, aiohttp and
OpenTelemetry inside the commands that use them, so `--version`, `--help` and a mistyped flag answer at once
(`bench/cli_startup.py` measures it against `python -c "import asyncio"`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TextIO

from modelir.cli import calls, conformance, listing, records, run, serve
from modelir.cli._common import UserError

__all__ = ["main"]

# 128 + the signal's number, as a shell reports a process the signal ended.
_EXIT_SIGPIPE = 141
_EXIT_SIGINT = 130
# The spec's IR version (`option (modelir.v1.ir_version)` in version.proto), spelled here so that `--version` answers
# without loading the generated code; tests/test_cli_startup.py holds it equal to `modelir.version.IR_VERSION`.
SPEC_IR_VERSION = "1.1.0"


class _Version(argparse.Action):
    """`--version`: the SDK's version is read from the installed package's metadata only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from importlib import metadata

        try:
            sdk = metadata.version("modelir")
        except metadata.PackageNotFoundError:  # a source tree that was not installed
            sdk = "0+unknown"
        print(f"modelir {sdk} (IR {SPEC_IR_VERSION})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelir", description="modelir: a versioned IR for language models")
    parser.add_argument("--version", action=_Version, help="print the versions")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (serve, listing, calls, run, records, conformance):
        group.add(commands)
    return parser


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning is for the user: one line, without the source line that raised it."""
    print(f"modelir: warning: {message}", file=sys.stderr)


def _dispatch(args: argparse.Namespace) -> int:
    if not hasattr(args, "afunc"):
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    import asyncio
    import contextlib

    from modelir.telemetry import setup

    # A traced `run` or `generate` joins the caller's telemetry, and records get trace ids.
    with setup.installed_from_env() if args.command in ("run", "generate") else contextlib.nullcontext():
        try:
            afunc: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = args.afunc
            return asyncio.run(afunc(args))
        except KeyboardInterrupt:
            on_interrupt: Callable[[argparse.Namespace], int] | None = getattr(args, "on_interrupt", None)
            if on_interrupt is None:
                print("modelir: interrupted", file=sys.stderr)
                return _EXIT_SIGINT
            return on_interrupt(args)


def configure_logging() -> None:
    """The command's logging and warnings (also what each `serve --workers` process sets up)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # The format shows no thread or process fields: skip collecting them for every record (the server logs one
    # line per call, and each record would otherwise make a getpid() system call).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    warnings.showwarning = _show_warning


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    try:
        try:
            return _dispatch(args)
        finally:
            sys.stdout.flush()  # a reader that went away (`| head`) shows here, inside the handler below
    except BrokenPipeError:
        # The reader has all it wanted. Point stdout at /dev/null so that the interpreter's own flush at exit
        # does not raise a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _EXIT_SIGPIPE
    except KeyboardInterrupt:
        print("modelir: interrupted", file=sys.stderr)
        return _EXIT_SIGINT
    except Exception as exc:
        status = _one_line(exc)
        if status is None:
            raise
        return status


def _one_line(exc: Exception) -> int | None:
    """The line and exit status of a user's or a model's error (None: a bug, which keeps its traceback). The error
    classes are imported here, when one happened: a command that needs none of their modules never loads them."""
    from modelir import errors
    from modelir.batch import BatchInputError
    from modelir.config import ConfigError
    from modelir.records.files import RecordFileError
    from modelir.telemetry.setup import TelemetrySetupError

    if isinstance(exc, ConfigError):
        print(f"modelir: configuration error: {exc}", file=sys.stderr)
        return 2
    if isinstance(exc, UserError | RecordFileError | BatchInputError | FileExistsError | TelemetrySetupError):
        print(f"modelir: {exc}", file=sys.stderr)
        return 2
    if isinstance(exc, OSError):  # a file the checks above could not foresee (permissions, a full disk)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"modelir: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    if isinstance(exc, errors.ModelError):
        reason = errors.mapping_for(exc.reason).info_reason
        print(f"modelir: {reason}: {exc.message}", file=sys.stderr)
        return 1
    return None
