"""The `modelir` command line: serve, models, transports, validate, generate, run, records, conformance."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path

import orjson
from google.protobuf import json_format

from modelir import errors
from modelir.batch import BatchInputError
from modelir.config import ConfigError, ServerConfig, default_config, load_config
from modelir.interface import ModelInterface
from modelir.records import RecordFileError
from modelir.request_builder import build_request
from modelir.telemetry import setup
from modelir.telemetry.setup import TelemetrySetupError
from modelir.v1 import capabilities_pb2, request_pb2

_CAPABILITY_NAMES = {v: k.removeprefix("CAPABILITY_") for k, v in capabilities_pb2.Capability.items()}


def _config(args: argparse.Namespace) -> ServerConfig:
    return load_config(args.config) if getattr(args, "config", None) else default_config()


async def _open_model(args: argparse.Namespace) -> tuple[ModelInterface, ServerConfig | None]:
    if getattr(args, "target", None):
        from modelir.remote import RemoteModel

        return RemoteModel(args.target, args.model, token=os.environ.get("MODELIR_TOKEN")), None
    config = _config(args)
    if args.model not in config.models:
        raise errors.UnknownModelError(f"no model named {args.model!r} in {config.source}")
    return config.models[args.model], config


def _serve(args: argparse.Namespace) -> int:
    from modelir.server import serve
    from modelir.telemetry import access_log

    config = _config(args)
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
    with setup.installed_from_env():
        try:
            asyncio.run(
                serve(
                    config.models,
                    args.host,
                    args.port,
                    auth_tokens=config.auth_tokens,
                    grace=args.grace,
                    settings=config.server,  # TLS and gRPC limits from the configuration (robust-14)
                )
            )
        finally:
            access_log.access_log().flush()
    return 0


async def _models(args: argparse.Namespace) -> int:
    if args.target:
        from modelir.remote import list_models

        manifests = dict(await list_models(args.target, token=os.environ.get("MODELIR_TOKEN")))
    else:
        manifests = {name: model.capabilities for name, model in sorted(_config(args).models.items())}
    if args.json:
        print(
            orjson.dumps(
                {name: json_format.MessageToDict(m) for name, m in manifests.items()}, option=orjson.OPT_INDENT_2
            ).decode()
        )
        return 0
    width = max(len(n) for n in manifests) if manifests else 4
    print(f"{'model'.ljust(width)}  transport  capabilities")
    for name, manifest in manifests.items():
        caps = ", ".join(_CAPABILITY_NAMES[c] for c in manifest.capabilities)
        print(f"{name.ljust(width)}  {manifest.transport}  {caps}")
    return 0


def _transports(args: argparse.Namespace) -> int:
    """Every transport and the options a configuration entry may give it."""
    from modelir.registry import registry

    for name, entry in registry().items():
        print(name)
        for option in entry.options.values():
            print(f"  {option.name}: {option.describe()}")
    return 0


async def _validate(args: argparse.Namespace) -> int:
    request = json_format.Parse(Path(args.request).read_bytes(), request_pb2.Request())  # noqa: ASYNC240 (tiny file)
    model, _ = await _open_model(args)
    verdict = await model.avalidate(request)
    for violation in verdict.field_violations:
        print(f"invalid: {violation.field}: {violation.description}")
    if verdict.field_violations:
        return 1
    print("needs: " + ", ".join(_CAPABILITY_NAMES[c] for c in verdict.required))
    if verdict.accepted:
        print(f"accepted by {model.name}")
        return 0
    print(errors.describe_unsupported(verdict.unsupported))
    return 1


async def _generate(args: argparse.Namespace) -> int:
    model, _ = await _open_model(args)
    request = build_request(model.name, prompt=args.prompt, max_output_tokens=args.max_tokens)
    if args.chat:
        request = build_request(model.name, messages=[("user", args.prompt)], max_output_tokens=args.max_tokens)
    if args.stream:
        from modelir.accumulate import StreamAccumulator

        accumulator = StreamAccumulator()
        async for event in model.astream(request):
            accumulator.add(event)
            if event.WhichOneof("event") == "delta" and event.delta.WhichOneof("content") == "text":
                print(event.delta.text, end="", flush=True)
        print()
        response = accumulator.response()
    else:
        response = await model.arun(request)
        for choice in response.choices:
            print("".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text"))
    usage = response.usage
    print(
        f"[usage] input={usage.input_token_count} output={usage.output_token_count}"
        + (f" error={response.error.message}" if response.HasField("error") else ""),
        file=sys.stderr,
    )
    return 0


def _conformance(args: argparse.Namespace) -> int:
    from modelir import conformance

    fixtures = Path(args.fixtures) if args.fixtures else conformance.DEFAULT_FIXTURES
    report = conformance.run(fixtures, args.transport)
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        for name, result in report["transports"].items():
            cases = result["cases"]
            passed = sum(c["passed"] for c in cases)
            print(f"{name}: {passed}/{len(cases)} cases passed" + ("" if result["passed"] else "  FAILED"))
            for case in cases:
                for problem in case["problems"]:
                    print(f"  {case['case']}: {problem}")
            for problem in result["coverage"]:
                print(f"  coverage: {problem}")
    return 0 if report["passed"] else 1


async def _run(args: argparse.Namespace) -> int:
    from modelir.batch import read_inputs, run_batch
    from modelir.batch.schedulers import scheduler_from_args

    model, config = await _open_model(args)
    inputs = read_inputs(args.input)
    summary = await run_batch(
        model,
        inputs,
        args.output,
        scheduler=scheduler_from_args(args),  # local asyncio workers, or Ray with --ray
        resume=args.resume,
        retry_failed=not args.no_retry_failed,
        fmt=args.format,
        run_metadata={"model": args.model, "input": str(args.input), "argv": " ".join(sys.argv[1:])},
    )
    print(
        f"{summary.ok} ok, {summary.failed} failed, {summary.skipped} already done, of {summary.total}",
        file=sys.stderr,
    )
    if config is not None:
        await config.aclose()
    return 0 if summary.failed == 0 else 1


def _records(args: argparse.Namespace) -> int:
    from collections import Counter

    from modelir import records
    from modelir.v1 import record_pb2

    if args.action == "convert":
        count = records.convert(args.file, args.target, args.to)
        print(f"wrote {count} records to {args.target} ({args.to})")
        return 0
    scan = records.scan(args.file)
    header = scan.header
    if header is not None:
        records.check_readable(header, args.file)
    status = Counter(record_pb2.RecordStatus.Name(r.status).removeprefix("RECORD_STATUS_") for r in scan.records)
    latest: dict[str, int] = {}
    duplicates = []
    for record in scan.records:
        if record.status in (record_pb2.RECORD_STATUS_OK, record_pb2.RECORD_STATUS_PARTIAL):
            if record.key in latest:
                duplicates.append(record.key)
            latest[record.key] = record.status
    if args.action == "inspect":
        print(f"file: {args.file} ({records.format_of(args.file)})")
        if header is not None:
            print(f"IR version: {header.ir_version}  SDK version: {header.sdk_version}")
            print(f"created: {header.create_time.ToJsonString()}")
            for key, value in sorted(header.run_metadata.items()):
                print(f"  {key}: {value}")
        print(f"records: {len(scan.records)}  " + "  ".join(f"{k.lower()}: {v}" for k, v in sorted(status.items())))
        models = Counter((r.provenance.configured_model, r.provenance.provider_model) for r in scan.records)
        for (configured, provider), count in sorted(models.items()):
            print(f"model {configured} (provider: {provider or '-'}): {count}")
        versions = Counter(r.provenance.ir_version for r in scan.records)
        print("record IR versions: " + ", ".join(f"{v} ({n})" for v, n in sorted(versions.items())))
    problems = list(scan.problems) + [f"key {k!r} has more than one successful record" for k in duplicates]
    failed_keys = {r.key for r in scan.records if r.status == record_pb2.RECORD_STATUS_FAILED}
    unresolved = failed_keys - set(latest)
    if args.action == "verify":
        print(
            f"{len(scan.records)} records, {len(latest)} keys with a successful record, "
            f"{len(unresolved)} keys only failed"
        )
        for problem in problems:
            print(f"problem: {problem}")
        print("ok" if not problems else "NOT ok")
    return 0 if not problems else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelir", description="modelir: a versioned IR for language models")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gRPC ModelService")
    serve.add_argument("--config", help="a YAML file of models (default: the built-in reference model)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051, help="0 picks a free port (logged)")
    serve.add_argument("--grace", type=float, default=30.0, help="seconds to drain in-flight calls on SIGTERM")
    serve.add_argument(
        "--access-log",
        choices=["text", "json", "off"],
        default=os.environ.get("MODELIR_ACCESS_LOG", "text"),
        help="one line per call on stderr: text, JSON lines, or off (default $MODELIR_ACCESS_LOG or text)",
    )
    serve.set_defaults(func=_serve)

    def where(sub: argparse.ArgumentParser) -> None:
        group = sub.add_mutually_exclusive_group()
        group.add_argument("--config", help="a YAML file of models (default: the built-in reference model)")
        group.add_argument(
            "--target",
            help="a modelir server host:port, replicas as IP:port,IP:port or dns:///name:port (token: $MODELIR_TOKEN)",
        )

    models = commands.add_parser("models", help="list models and their capabilities")
    where(models)
    models.add_argument("--json", action="store_true", help="print the manifests as JSON")
    models.set_defaults(afunc=_models)

    transports = commands.add_parser("transports", help="list the transports and their configuration options")
    transports.set_defaults(func=_transports)

    validate = commands.add_parser("validate", help="check a request (proto-JSON file) against a model")
    where(validate)
    validate.add_argument("--model", required=True)
    validate.add_argument("--request", required=True, help="a file holding one Request in proto-JSON")
    validate.set_defaults(afunc=_validate)

    generate = commands.add_parser("generate", help="run one prompt and print the text and usage")
    where(generate)
    generate.add_argument("--model", required=True)
    generate.add_argument("--stream", action="store_true", help="print text as it arrives")
    generate.add_argument("--chat", action="store_true", help="send the prompt as a user message")
    generate.add_argument("--max-tokens", type=int, default=None)
    generate.add_argument("prompt")
    generate.set_defaults(afunc=_generate)
    run = commands.add_parser("run", help="run a file of requests into a record file (resumable)")
    where(run)
    run.add_argument("--model", required=True)
    run.add_argument("--input", required=True, help="JSON Lines of IR requests (or {key, request} objects)")
    run.add_argument("--output", required=True, help="the record file (JSON Lines unless it ends in .binpb)")
    run.add_argument("--concurrency", type=int, default=8)
    run.add_argument("--resume", action="store_true", help="continue an existing output file")
    run.add_argument("--no-retry-failed", action="store_true", help="on resume, leave failed keys failed")
    run.add_argument("--format", choices=["jsonl", "binary"], help="the format of a new output file")
    run.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS", help="call on Ray (alone: a local cluster)")
    run.add_argument("--ray-workers", type=int, help="Ray actors (default: one per CPU of the cluster)")
    run.set_defaults(afunc=_run)

    records = commands.add_parser("records", help="inspect, verify or convert record files")
    actions = records.add_subparsers(dest="action", required=True)
    for action, text in (("inspect", "header, counts by status, model and version"), ("verify", "check every entry")):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("file")
        sub.set_defaults(func=_records)
    convert = actions.add_parser("convert", help="copy a record file into the other format")
    convert.add_argument("file")
    convert.add_argument("target")
    convert.add_argument("--to", choices=["jsonl", "binary"], required=True)
    convert.set_defaults(func=_records)

    conformance = commands.add_parser("conformance", help="replay the golden wire fixtures")
    conformance.add_argument("--transport", help="only this transport")
    conformance.add_argument("--fixtures", help="the fixtures folder (default: the repository's conformance/fixtures)")
    conformance.add_argument("--json", action="store_true", help="print per-transport, per-case results as JSON")
    conformance.set_defaults(func=_conformance)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # The format shows no thread or process fields: skip collecting them for every record (the server logs one
    # line per call, and each record would otherwise make a getpid() system call).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    try:
        if hasattr(args, "afunc"):
            # A traced `run` or `generate` joins the caller's telemetry, and records get trace ids.
            with setup.installed_from_env() if args.command in ("run", "generate") else contextlib.nullcontext():
                return asyncio.run(args.afunc(args))
        return args.func(args)
    except ConfigError as exc:
        print(f"modelir: configuration error: {exc}", file=sys.stderr)
        return 2
    except (RecordFileError, BatchInputError, FileExistsError, TelemetrySetupError) as exc:
        print(f"modelir: {exc}", file=sys.stderr)
        return 2
    except errors.ModelError as exc:
        reason = errors.mapping_for(exc.reason).info_reason
        print(f"modelir: {reason}: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
