"""Writes the record conformance vectors in this directory and their manifest.json (run from the repository root:
`.venv/bin/python clients/testdata/records/make_vectors.py`; review the diff). Each client's tests read every file
the manifest lists and compare what their record reader yields with it.

- `v1_0.{jsonl,binpb}`: records written by the SDK's `RecordWriter` of IR 1.0 (kept as that release wrote them:
  a later run of this script leaves them alone).
- `torn.{jsonl,binpb}`: the same with a torn last entry (a last line without its newline; a cut-off entry).
- `newer.{jsonl,binpb}`: a simulated newer writer (one minor version past this release, e.g. IR 1.2.0 while this
  release is IR 1.1.0): its header's descriptor set gives `Record` a field
  this release does not have (`string note = 100`) and one record has a status this release does not know (99).
  A reader keeps both: re-serialized, each record equals the writer's bytes (`recordBytes`, base64).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf import descriptor_pb2, json_format
from modelir import IR_VERSION
from modelir.records import files
from modelir.v1 import record_pb2

HERE = Path(__file__).resolve().parent
# The simulated newer writer's version: one minor version past this release, so that every reader warns about it.
_MAJOR, _MINOR, _ = (int(n) for n in IR_VERSION.split("."))
NEWER = f"{_MAJOR}.{_MINOR + 1}.0"
RECORDS = [
    {
        "key": "a",
        "status": 1,
        "response": {"choices": [{"message": {"role": 2, "parts": [{"text": "Hello, world."}]}}]},
    },
    {"key": "b", "status": 3, "failure": {"message": "the provider refused"}},
    {"key": "ü/3", "status": 2, "response": {"choices": [{"message": {"role": 2, "parts": [{"text": "Ünïcode ✓"}]}}]}},
]


def _write(path: Path, records: list[dict], torn: bool) -> None:
    path.unlink(missing_ok=True)
    with files.RecordWriter.create(path, run_metadata={"vector": path.stem}) as writer:
        for record in records:
            writer.append(json_format.ParseDict(record, record_pb2.Record()))
    if torn:
        data = path.read_bytes()
        path.write_bytes(data[:-1] if path.suffix == ".jsonl" else data[:-5])


def _newer(path: Path) -> list[str]:
    """A file as a newer writer with one more `Record` field would write it; returns each record's bytes."""
    header = record_pb2.RecordHeader(
        ir_version=NEWER, sdk_version="vector", ir_descriptor_set=files.ir_descriptor_set()
    )
    header.create_time.FromSeconds(1_800_000_000)
    fds = descriptor_pb2.FileDescriptorSet.FromString(header.ir_descriptor_set)
    record_file = next(f for f in fds.file if f.name == "modelir/v1/record.proto")
    record_type = next(m for m in record_file.message_type if m.name == "Record")
    record_type.field.add(
        name="note",
        number=100,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        json_name="note",
    )
    header.ir_descriptor_set = fds.SerializeToString()
    entry_class = files.message_class(header, "modelir.v1.RecordFileEntry")
    newer = [dict(RECORDS[0], note=f"a field of IR {NEWER}"), dict(RECORDS[1], status=99)]
    first = entry_class()
    first.header.ParseFromString(header.SerializeToString())
    entries = [first] + [json_format.ParseDict({"record": r}, entry_class()) for r in newer]
    fmt = files.JSONL if path.suffix == ".jsonl" else "binary"
    path.write_bytes(b"".join(files.encode_entry(e, fmt) for e in entries))
    return [base64.b64encode(e.record.SerializeToString()).decode() for e in entries[1:]]


def _expected(records: list[dict]) -> list[dict]:
    def text(r: dict) -> str:
        return "".join(
            p.get("text", "") for c in r.get("response", {}).get("choices", [])[:1] for p in c["message"]["parts"]
        )

    return [{"key": r["key"], "status": r["status"], "text": text(r)} for r in records]


def main() -> None:
    manifest: dict[str, dict] = {}
    for suffix in ("jsonl", "binpb"):
        for name, torn in (("v1_0", False), ("torn", True)):
            if not (HERE / f"{name}.{suffix}").exists():  # IR 1.0's files stay as IR 1.0 wrote them
                _write(HERE / f"{name}.{suffix}", RECORDS, torn=torn)
        manifest[f"v1_0.{suffix}"] = {"irVersion": "1.0.0", "records": _expected(RECORDS), "skipped": 0}
        manifest[f"torn.{suffix}"] = {"irVersion": "1.0.0", "records": _expected(RECORDS[:2]), "skipped": 1}
        record_bytes = _newer(HERE / f"newer.{suffix}")
        newer = [dict(RECORDS[0]), dict(RECORDS[1], status=99)]
        manifest[f"newer.{suffix}"] = {
            "irVersion": NEWER,
            "records": _expected(newer),
            "skipped": 0,
            "recordBytes": record_bytes,
        }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
