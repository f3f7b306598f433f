"""The `modelir` command line: the parser, and the one place a user's mistake becomes one line instead of a traceback.

One module per command group: `serve`, `listing` (models, transports, check), `calls` (validate, generate), `run`,
`records`, `conformance`. Each adds its subcommands with `add(commands)`; a command is `func` (sync) or `afunc`
(a coroutine run here), and may give `on_interrupt` to say what Ctrl-C left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import warnings

from modelir import errors
from modelir.batch import BatchInputError
from modelir.cli import calls, conformance, listing, records, run, serve
from modelir.cli._common import UserError
from modelir.config import ConfigError
from modelir.records.files import RecordFileError
from modelir.telemetry import setup
from modelir.telemetry.setup import TelemetrySetupError
from modelir.version import IR_VERSION, SDK_VERSION

__all__ = ["main"]

# 128 + the signal's number, as a shell reports a process the signal ended.
_EXIT_SIGPIPE = 141
_EXIT_SIGINT = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelir", description="modelir: a versioned IR for language models")
    parser.add_argument(
        "--version", action="version", version=f"modelir {SDK_VERSION} (IR {IR_VERSION})", help="print the versions"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (serve, listing, calls, run, records, conformance):
        group.add(commands)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning is for the user: one line, without the source line that raised it."""
    print(f"modelir: warning: {message}", file=sys.stderr)


def _dispatch(args: argparse.Namespace) -> int:
    if not hasattr(args, "afunc"):
        return args.func(args)
    # A traced `run` or `generate` joins the caller's telemetry, and records get trace ids.
    with setup.installed_from_env() if args.command in ("run", "generate") else contextlib.nullcontext():
        try:
            return asyncio.run(args.afunc(args))
        except KeyboardInterrupt:
            on_interrupt = getattr(args, "on_interrupt", None)
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
    except ConfigError as exc:
        print(f"modelir: configuration error: {exc}", file=sys.stderr)
        return 2
    except (UserError, RecordFileError, BatchInputError, FileExistsError, TelemetrySetupError) as exc:
        print(f"modelir: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the checks above could not foresee (permissions, a full disk)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"modelir: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except errors.ModelError as exc:
        reason = errors.mapping_for(exc.reason).info_reason
        print(f"modelir: {reason}: {exc.message}", file=sys.stderr)
        return 1
