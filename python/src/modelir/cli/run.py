"""`modelir run`: a file of requests into a record file, resumable; Ctrl-C says what is safe and how to resume."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from modelir.cli._common import add_where, input_file, open_model, output_file, positive_int, warn

_SUFFIX_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".binpb": "binary",
    ".pb": "binary",
    ".bin": "binary",
}


def _check_format(args: argparse.Namespace, output: Path) -> None:
    """A `--format` that the output's extension contradicts is almost always a slip: say so (the flag wins)."""
    implied = _SUFFIX_FORMATS.get(output.suffix.lower())
    if args.format and implied and implied != args.format:
        if args.resume and output.exists():
            warn(f"--format {args.format} is ignored: --resume appends to {output} in the format it already has")
        else:
            warn(
                f"--format {args.format}, but {output} ends in {output.suffix} (a {implied} name); "
                f"writing {args.format}"
            )


async def _run(args: argparse.Namespace) -> int:
    from modelir.batch import read_inputs, run_batch
    from modelir.batch.schedulers import scheduler_from_args

    source = input_file(args.input, "--input")
    output = output_file(args.output, "--output")
    _check_format(args, output)
    model, config = await open_model(args)
    inputs = read_inputs(source)
    args.input_count = len(inputs)  # for the line an interrupt prints
    try:
        summary = await run_batch(
            model,
            inputs,
            output,
            scheduler=scheduler_from_args(args),  # local asyncio workers, or Ray with --ray
            resume=args.resume,
            retry_failed=not args.no_retry_failed,
            fmt=args.format,
            run_metadata={"model": args.model, "input": str(args.input), "argv": " ".join(sys.argv[1:])},
        )
    finally:
        if config is not None:
            await config.aclose()
    print(
        f"{summary.ok} ok, {summary.failed} failed, {summary.skipped} already done, of {summary.total}",
        file=sys.stderr,
    )
    return 0 if summary.failed == 0 else 1


def interrupted(args: argparse.Namespace) -> int:
    """After Ctrl-C: how many inputs have a record safe on disk, and the command that carries on."""
    from modelir.batch.ledger import SUCCESS
    from modelir.records import files as records

    output = Path(args.output)
    safe = 0
    if output.exists():
        try:
            scan = records.scan(output)
            safe = len({r.key for r in scan.records if r.status in SUCCESS})
        except records.RecordFileError:
            pass
    total = getattr(args, "input_count", None)
    of = f" of {total}" if total is not None else ""
    argv = [a for a in sys.argv[1:] if a != "--resume"] if sys.argv[1:2] == ["run"] else ["run", "..."]
    resume = shlex.join(["modelir", *argv, "--resume"])
    print(f"modelir: interrupted: {safe}{of} records are safe in {output}; to carry on: {resume}", file=sys.stderr)
    return 130


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser("run", help="run a file of requests into a record file (resumable)")
    add_where(run)
    run.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    run.add_argument("--input", required=True, help="JSON Lines of IR requests (or {key, request} objects)")
    run.add_argument("--output", required=True, help="the record file (JSON Lines unless it ends in .binpb)")
    run.add_argument(
        "--concurrency",
        type=positive_int,
        default=8,
        help="calls in flight at once, at least 1 (per worker with --ray; default: %(default)s)",
    )
    run.add_argument("--resume", action="store_true", help="continue an existing output file")
    run.add_argument("--no-retry-failed", action="store_true", help="on resume, leave failed keys failed")
    run.add_argument("--format", choices=["jsonl", "binary"], help="the format of a new output file")
    run.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS", help="call on Ray (alone: a local cluster)")
    run.add_argument("--ray-workers", type=positive_int, help="Ray actors (default: one per CPU of the cluster)")
    run.set_defaults(afunc=_run, on_interrupt=interrupted)
