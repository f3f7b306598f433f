"""`modelir serve`: the gRPC ModelService over the configured models, in one process or `--workers N`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from modelir.cli._common import config

# The server, asyncio, multiprocessing and telemetry are imported by the command, after the arguments are parsed.
if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue

_log = logging.getLogger("modelir.server")


def _serve(args: argparse.Namespace) -> int:
    from modelir.config import ConfigError

    if args.workers < 1:
        raise ConfigError(f"--workers takes a number of processes, at least 1, not {args.workers}")
    if args.workers > 1:
        return _supervise(args)
    return _serve_here(args)


def _serve_here(
    args: argparse.Namespace, ready: Callable[[int], None] | None = None, *, reuse_port: bool = False
) -> int:
    """Serve in this process until SIGTERM or SIGINT; `ready` is called with the bound port once serving. The port
    is shared (SO_REUSEPORT) only by `--workers` (`reuse_port`): a busy port is refused otherwise."""
    import asyncio

    from modelir.config import ConfigError
    from modelir.server import serve
    from modelir.telemetry import access_log, setup

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
                ready=ready,
                reuse_port=reuse_port,
            )
        finally:
            await loaded.aclose()  # the models' HTTP sessions, so shutdown ends without "Unclosed client session"

    with setup.installed_from_env(default_sampler_ratio=setup.SERVER_SAMPLER_RATIO):
        try:
            asyncio.run(serve_then_close())
        finally:
            access_log.access_log().flush()
    return 0


# ---- --workers N ----------------------------------------------------------------------------------------------
#
# N worker processes, each a whole `modelir serve` (its own models, HTTP sessions and limiters: in-memory limits
# hold per worker; a `limiter_backend: redis://...` shares them), all bound to one port with SO_REUSEPORT (set for
# the workers only: one `modelir serve` refuses a busy port), so the kernel spreads incoming connections over them.
# The workers are spawned, not forked: grpc's threads do not survive a fork. The supervisor only starts them,
# forwards SIGTERM/SIGINT, and stops all of them when one dies (a process manager restarts the whole group: no
# worker is left serving a half-broken set).


def _supervise(args: argparse.Namespace) -> int:
    import multiprocessing
    import queue
    import socket

    config(args)  # a configuration error is one line here, not one traceback per worker
    holder = None
    if args.port == 0:  # pick the port once, for every worker; held until they have all bound it
        holder = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((args.host, 0))
        args.port = holder.getsockname()[1]
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Queue()
    workers = [
        spawn.Process(target=_worker, args=(args, index, ready), name=f"modelir-worker-{index}")
        for index in range(args.workers)
    ]
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:
            if worker.pid is not None and worker.exitcode is None:
                os.kill(worker.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for worker in workers:
        worker.start()
    try:
        started = 0
        while started < len(workers) and not stopping:
            if any(worker.exitcode is not None for worker in workers):
                break
            try:
                ready.get(timeout=0.2)
                started += 1
            except queue.Empty:  # look at the workers again
                continue
        if holder is not None:
            holder.close()
        if started == len(workers):
            _log.info("modelir: all %d workers serving on %s:%d", len(workers), args.host, args.port)
        return _watch(workers, lambda: stopping, stop, args.grace)
    finally:
        for worker in workers:
            if worker.exitcode is None and worker.pid is not None:
                worker.kill()
            worker.join(1)


def _watch(
    workers: Sequence[BaseProcess], stopping: Callable[[], bool], stop: Callable[[int, object], None], grace: float
) -> int:
    """Wait for the workers; when one ends before a stop was asked for, stop the rest. The exit status is the
    first failure's, else 0."""
    from multiprocessing.connection import wait

    failed = 0
    running = list(workers)
    while running:
        ended = wait([worker.sentinel for worker in running])
        for worker in [w for w in running if w.sentinel in ended]:
            worker.join()
            running.remove(worker)
            if worker.exitcode != 0 and not failed:
                failed = 1
            if not stopping():
                _log.error(
                    "modelir: worker %s (pid %s) ended with %s; stopping the others",
                    worker.name,
                    worker.pid,
                    worker.exitcode,
                )
                stop(signal.SIGTERM, None)
    return failed


def _worker(args: argparse.Namespace, index: int, ready: Queue[tuple[int, int]]) -> None:
    """One worker: the CLI's logging, then `modelir serve` in this process on the shared port."""
    from modelir.cli import configure_logging

    configure_logging()
    args.workers = 1
    sys.exit(_serve_here(args, ready=lambda port: ready.put((index, port)), reuse_port=True))


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run the gRPC ModelService")
    serve.add_argument("--config", help="a YAML file of models (default: the built-in reference model)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=50051, help="the port (default: 50051; 0 picks a free one, logged)")
    serve.add_argument(
        "--grace", type=float, default=30.0, help="seconds to drain in-flight calls on SIGTERM (default: %(default)s)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve from N processes on the one port (SO_REUSEPORT); each has its own in-memory limits, so share "
        "them with limiter_backend: redis://... (default: 1)",
    )
    serve.add_argument(
        "--access-log",
        choices=["text", "json", "off"],
        default=os.environ.get("MODELIR_ACCESS_LOG", "text"),
        help="one line per call on stderr: text, JSON lines, or off (default $MODELIR_ACCESS_LOG or text)",
    )
    serve.set_defaults(func=_serve)
