"""`modelir records`: inspect, verify, show and convert record files."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import TYPE_CHECKING

from modelir.cli._common import UserError, input_file, output_file

if TYPE_CHECKING:  # the record modules are imported by the command, after the arguments are parsed
    from modelir.v1 import record_pb2


def _status(record: record_pb2.Record) -> str:
    from modelir.v1 import record_pb2
    from modelir.writing.names import enum_name

    return enum_name(record_pb2.RecordStatus, record.status)  # a newer release's status prints as its number


def _show(path: str, keys: list[str] | None) -> int:
    """One line a record, printed as it is read (`records show | head` stops reading when head has enough): key,
    status, and the answer's text (JSON-quoted, so a line stays a line) or the failure."""
    from modelir import errors, records
    from modelir.reading.view import view
    from modelir.v1 import record_pb2

    wanted = set(keys or ())
    seen: set[str] = set()
    for record in records.read_records(path):
        seen.add(record.key)
        if wanted and record.key not in wanted:
            continue
        if record.status == record_pb2.RECORD_STATUS_FAILED:
            detail = f"{errors.mapping_for(record.failure.reason).info_reason}: {record.failure.message}"
        else:
            texts = view(record.response).texts
            detail = "  ".join(json.dumps(t, ensure_ascii=False) for t in texts) if texts else "(no choices)"
        print(f"{record.key}  {_status(record)}  {detail}")
    missing = wanted - seen
    if missing:
        raise UserError(f"--key: no record with key {', '.join(repr(k) for k in sorted(missing))}")
    return 0


def _records(args: argparse.Namespace) -> int:
    from modelir import records
    from modelir.v1 import record_pb2

    if args.action == "show":
        return _show(str(input_file(args.file, "records show")), args.key)
    if args.action == "convert":
        source = input_file(args.file, "records convert")
        count = records.convert(source, output_file(args.target, "records convert"), args.to)
        print(f"wrote {count} records to {args.target} ({args.to})")
        return 0
    scan = records.scan(input_file(args.file, f"records {args.action}"))
    header = scan.header
    if header is not None:
        records.check_readable(header, args.file)
    status = Counter(_status(r) for r in scan.records)
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
        print(f"records: {len(scan.records)}  " + "  ".join(f"{k}: {v}" for k, v in sorted(status.items())))
        models = Counter((r.provenance.configured_model, r.provenance.provider_model) for r in scan.records)
        for (configured, provider), count in sorted(models.items()):
            print(f"model {configured} (provider: {provider or '-'}): {count}")
        versions = Counter(r.provenance.ir_version for r in scan.records)
        print("record IR versions: " + ", ".join(f"{v} ({n})" for v, n in sorted(versions.items())))
    problems = list(scan.problems) + [f"key {k!r} has more than one successful record" for k in duplicates]
    problems += records.provenance_problems(scan.records)  # a record must say where it came from
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


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    records_parser = commands.add_parser("records", help="inspect, verify, show or convert record files")
    actions = records_parser.add_subparsers(dest="action", required=True)
    for action, text in (("inspect", "header, counts by status, model and version"), ("verify", "check every entry")):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("file", help="the record file (JSON Lines or binary)")
        sub.set_defaults(func=_records)
    show = actions.add_parser("show", help="one line a record: key, status and the answer's text")
    show.add_argument("file", help="the record file (JSON Lines or binary)")
    show.add_argument("--key", action="append", help="only this key (may be given more than once)")
    show.set_defaults(func=_records)
    convert = actions.add_parser("convert", help="copy a record file into the other format")
    convert.add_argument("file", help="the record file to read")
    convert.add_argument("target", help="the new file to write")
    convert.add_argument("--to", choices=["jsonl", "binary"], required=True, help="the new file's format")
    convert.set_defaults(func=_records)
