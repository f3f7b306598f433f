"""The record conformance vectors (`conformance/records/`): every file any release of the Python SDK wrote reads as
its manifest says, here as in the TypeScript, Go and Rust readers."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from modelir.records.convert import convert
from modelir.records.files import format_of, header_end, message_class, read_records, scan
from modelir.version import IR_SEMVER, parse_semver

VECTORS = Path(__file__).resolve().parent.parent / "conformance" / "records"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())
FILES = MANIFEST["files"]


def _text(record) -> str:
    if not record.response.choices:
        return ""
    return "".join(part.text for part in record.response.choices[0].message.parts if part.HasField("text"))


def _seen(records) -> list[dict]:
    return [{"key": r.key, "status": int(r.status), "text": _text(r)} for r in records]


def test_every_release_so_far_has_vectors_of_both_formats():
    versions = {entry["ir_version"] for entry in FILES}
    assert "1.0.0" in versions
    for version in versions:
        assert {entry["format"] for entry in FILES if entry["ir_version"] == version} == {"jsonl", "binary"}


@pytest.mark.parametrize("entry", FILES, ids=[entry["path"] for entry in FILES])
def test_a_vector_reads_as_its_manifest_says(entry):
    path = VECTORS / entry["path"]
    assert format_of(path) == entry["format"]
    found = scan(path)
    assert found.header.ir_version == entry["ir_version"]
    assert dict(found.header.run_metadata) == entry["run_metadata"]
    assert found.torn_bytes == entry["torn_tail_bytes"] > 0
    assert found.good_bytes + found.torn_bytes == path.stat().st_size
    assert _seen(found.records) == entry["records"]


@pytest.mark.parametrize("entry", FILES, ids=[entry["path"] for entry in FILES])
def test_the_reader_skips_the_torn_tail_with_a_warning_and_keeps_unknown_enum_numbers(entry):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = list(read_records(VECTORS / entry["path"]))
    assert _seen(records) == entry["records"]
    assert any("torn last entry" in str(warning.message) for warning in caught)
    unknown = [record for record in records if record.key == "future"]
    assert unknown and unknown[0].status == 7 and unknown[0].response.choices[0].finish_reason == 42


@pytest.mark.parametrize("entry", FILES, ids=[entry["path"] for entry in FILES])
def test_the_header_types_decode_every_record_and_convert_keeps_them(entry, tmp_path):
    path = VECTORS / entry["path"]
    header = scan(path).header
    assert message_class(header, "modelir.v1.Record").DESCRIPTOR.fields_by_name["key"].json_name == "key"
    other = "binary" if entry["format"] == "jsonl" else "jsonl"
    target = tmp_path / ("copy.binpb" if other == "binary" else "copy.jsonl")
    assert convert(path, target, other) == len(entry["records"])
    assert _seen(scan(target).records) == entry["records"]
    assert scan(target).header.ir_version == entry["ir_version"]


def test_this_release_reads_every_vector_of_its_major():
    assert all(parse_semver(entry["ir_version"]).major == IR_SEMVER.major for entry in FILES)


OLDER_MINOR = [
    entry
    for entry in FILES
    if parse_semver(entry["ir_version"]).major == IR_SEMVER.major
    and parse_semver(entry["ir_version"]).minor < IR_SEMVER.minor
]


@pytest.mark.parametrize("entry", OLDER_MINOR, ids=[entry["path"] for entry in OLDER_MINOR])
def test_resuming_an_older_minor_file_upgrades_its_header_and_keeps_its_records_byte_for_byte(entry, tmp_path):
    from modelir.records.files import UPGRADED_FROM_KEY, RecordWriter, read_header
    from modelir.v1 import record_pb2
    from modelir.version import IR_VERSION

    source = VECTORS / entry["path"]
    path = tmp_path / source.name
    path.write_bytes(source.read_bytes())
    before = scan(source)
    writer, found = RecordWriter.resume(path)
    assert _seen(found.records) == entry["records"]
    writer.append(record_pb2.Record(key="appended", status=record_pb2.RECORD_STATUS_OK))
    writer.close()
    header = read_header(path)
    assert header.ir_version == IR_VERSION
    assert header.run_metadata[UPGRADED_FROM_KEY] == entry["ir_version"]
    assert header.run_metadata["vector"] == entry["run_metadata"]["vector"]
    after = scan(path)
    assert after.torn_bytes == 0 and not after.problems
    assert _seen(after.records) == [*entry["records"], {"key": "appended", "status": 1, "text": ""}]
    # The older records are copied as they were written: everything after the old header, up to the torn tail.
    old_header_end = header_end(source)
    assert source.read_bytes()[old_header_end : before.good_bytes] in path.read_bytes()


RELEASE_1_0 = VECTORS.parent.parent / "proto" / "baseline" / "modelir-v1.0.0.binpb"


@pytest.mark.parametrize("entry", FILES, ids=[entry["path"] for entry in FILES])
def test_a_reader_built_from_the_1_0_release_reads_every_vector(entry):
    """A 1.0 reader (its types from IR 1.0.0's image, not this SDK's) reads every later release's files: the
    records' keys, statuses and texts, with the fields it does not know skipped."""
    from google.protobuf import json_format
    from modelir.records.files import _binary_frames, _jsonl_frames
    from modelir.v1 import record_pb2

    old_header = record_pb2.RecordHeader(ir_version="1.0.0", ir_descriptor_set=RELEASE_1_0.read_bytes())
    entry_class = message_class(old_header, "modelir.v1.RecordFileEntry")
    assert "embed_request" not in entry_class.DESCRIPTOR.fields_by_name["record"].message_type.fields_by_name
    path = VECTORS / entry["path"]
    with path.open("rb") as handle:
        frames = [frame for _, frame in (_jsonl_frames if entry["format"] == "jsonl" else _binary_frames)(handle)]
    assert frames[-1] is None  # the torn tail
    decoded = [
        json_format.Parse(frame, entry_class(), ignore_unknown_fields=True)
        if entry["format"] == "jsonl"
        else entry_class.FromString(frame)
        for frame in frames[:-1]
    ]
    assert decoded[0].header.ir_version == entry["ir_version"]
    assert _seen(item.record for item in decoded[1:]) == entry["records"]
