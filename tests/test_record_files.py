"""Record files as the spec defines them (`proto/README.md`, "Record files"): integer enums in JSON Lines, the
writer's descriptor set in the header, the opaque key rule and a resume that refuses a changed input."""

from __future__ import annotations

import asyncio
import os

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from modelir import Model, ReferenceModel
from modelir.batch import ChangedInputError, read_inputs, run_batch
from modelir.records import files as records
from modelir.records import varint
from modelir.records.convert import convert
from modelir.records.files import BINARY, JSONL, RecordWriter
from modelir.v1 import record_pb2, response_pb2
from modelir.version import IR_SEMVER

_FUTURE_FINISH = 42  # a FinishReason value a later release may add


def _pool_from(descriptor_set: descriptor_pb2.FileDescriptorSet) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_set.file:
        pool.Add(file)
    return pool


def _edited_ir(edit) -> descriptor_pool.DescriptorPool:
    """This SDK's IR with `edit(file_descriptor_proto)` applied to `modelir/v1/response.proto`: another release."""
    descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(records.ir_descriptor_set())
    (response_file,) = [f for f in descriptor_set.file if f.name == "modelir/v1/response.proto"]
    edit(response_file)
    return _pool_from(descriptor_set)


def _class(pool: descriptor_pool.DescriptorPool, name: str):
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def _add_future_finish_reason(file: descriptor_pb2.FileDescriptorProto) -> None:
    (finish,) = [e for e in file.enum_type if e.name == "FinishReason"]
    finish.value.add(name="FINISH_REASON_FROM_THE_FUTURE", number=_FUTURE_FINISH)


def _newer_entry_file(tmp_path, *, use_integers: bool):
    """A JSON Lines record file written by a newer release whose FinishReason has one more value."""
    newer = _edited_ir(_add_future_finish_reason)
    entry_class = _class(newer, "modelir.v1.RecordFileEntry")
    header = entry_class()
    header.header.ir_version = "1.0.0"
    header.header.sdk_version = "newer"
    record = entry_class()
    record.record.key = "k"
    record.record.response.choices.add(index=0, finish_reason=_FUTURE_FINISH)
    path = tmp_path / f"newer-{use_integers}.jsonl"
    if use_integers:
        path.write_bytes(records.encode_entry(header, JSONL) + records.encode_entry(record, JSONL))
    else:  # what the writer did before: enum names, which an older reader cannot resolve
        lines = [json_format.MessageToJson(e, indent=None) for e in (header, record)]
        path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_writes_enums_as_integers_and_an_older_reader_keeps_a_newer_value(tmp_path):
    named = _newer_entry_file(tmp_path, use_integers=False)
    assert b"FINISH_REASON_FROM_THE_FUTURE" in named.read_bytes()
    (lost,) = records.read_records(named)
    assert lost.response.choices[0].finish_reason == response_pb2.FINISH_REASON_UNSPECIFIED  # the old failure

    numbered = _newer_entry_file(tmp_path, use_integers=True)
    assert b'"finishReason": 42' in numbered.read_bytes()
    (kept,) = records.read_records(numbered)
    assert kept.response.choices[0].finish_reason == _FUTURE_FINISH


def test_readers_accept_enum_names_and_integers(tmp_path):
    header = record_pb2.RecordFileEntry(header=record_pb2.RecordHeader(ir_version="1.0.0", sdk_version="x"))
    record = record_pb2.RecordFileEntry(record=record_pb2.Record(key="a", status=record_pb2.RECORD_STATUS_PARTIAL))
    path = tmp_path / "names.jsonl"
    path.write_text("".join(json_format.MessageToJson(e, indent=None) + "\n" for e in (header, record)))
    assert b"RECORD_STATUS_PARTIAL" in path.read_bytes()
    (back,) = records.read_records(path)
    assert back.status == record_pb2.RECORD_STATUS_PARTIAL
    assert records.encode_entry(record, JSONL) == b'{"record": {"key": "a", "status": 2}}\n'


def _strip_response_model(file: descriptor_pb2.FileDescriptorProto) -> None:
    (response,) = [m for m in file.message_type if m.name == "Response"]
    (model,) = [f for f in response.field if f.name == "model"]
    response.field.remove(model)


def _last_entry(data: bytes, fmt: str) -> bytes:
    """The last entry's JSON line, or its serialized bytes without the varint length (the framing of the spec)."""
    if fmt == JSONL:
        return data.splitlines()[-1]
    position, raw = 0, b""
    while position < len(data):
        length, start = varint.decode(data, position)
        raw, position = data[start : start + length], start + length
    return raw


@pytest.mark.parametrize("fmt", [JSONL, BINARY])
def test_a_reader_decodes_a_field_it_does_not_know_with_the_headers_descriptor_set(tmp_path, fmt):
    path = tmp_path / f"out.{'jsonl' if fmt == JSONL else 'binpb'}"
    with RecordWriter.create(path, fmt=fmt) as writer:
        writer.append(record_pb2.Record(key="a", response=response_pb2.Response(model="the-provider-model-7")))
    data = path.read_bytes()
    scan = records.scan(path)
    header = scan.header
    assert header is not None and header.ir_descriptor_set == records.ir_descriptor_set()
    names = {f.name for f in descriptor_pb2.FileDescriptorSet.FromString(header.ir_descriptor_set).file}
    assert {"modelir/v1/service.proto", "modelir/v1/stream.proto", "google/protobuf/timestamp.proto"} <= names

    # An older reader: the same IR without `Response.model`. The field is not among its fields.
    older_entry = _class(_edited_ir(_strip_response_model), "modelir.v1.RecordFileEntry")
    assert (
        "model"
        not in older_entry.DESCRIPTOR.fields_by_name["record"]
        .message_type.fields_by_name["response"]
        .message_type.fields_by_name
    )
    last = _last_entry(data, fmt)
    if fmt == JSONL:
        older = json_format.Parse(last, older_entry(), ignore_unknown_fields=True)
    else:
        older = older_entry.FromString(last)
    assert not hasattr(older.record.response, "model")

    # The header's own descriptor set decodes it.
    entry_class = records.message_class(header, "modelir.v1.RecordFileEntry")
    decoded = json_format.Parse(last, entry_class()) if fmt == JSONL else entry_class.FromString(last)
    assert decoded.record.response.model == "the-provider-model-7"
    assert records.message_class(header).DESCRIPTOR.full_name == "modelir.v1.Record"
    with pytest.raises(records.RecordFileError, match="no message"):
        records.message_class(header, "modelir.v1.Nothing")
    with pytest.raises(records.RecordFileError, match="no descriptor set"):
        records.message_class(record_pb2.RecordHeader(ir_version="1.0.0"))


def test_a_record_without_a_key_gets_its_position_in_the_file(tmp_path):
    path = tmp_path / "out.jsonl"
    with RecordWriter.create(path) as writer:
        writer.append(record_pb2.Record())
        writer.append(record_pb2.Record(key="mine"))
        writer.append(record_pb2.Record())
    writer, _ = RecordWriter.resume(path)
    with writer:
        writer.append(record_pb2.Record())
    assert [r.key for r in records.read_records(path)] == ["#0", "mine", "#2", "#3"]


def test_resume_refuses_an_input_that_changed_naming_the_key(tmp_path):
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    model = Model(ReferenceModel(), name="reference")
    quiet = open(os.devnull, "w")
    first = asyncio.run(run_batch(model, read_inputs(source)[:1], output, progress_stream=quiet))
    assert first.ok == 1
    # The same input resumes: the request at `#0` is the one recorded.
    same = asyncio.run(run_batch(model, read_inputs(source), output, resume=True, progress_stream=quiet))
    assert (same.skipped, same.ok) == (1, 1)
    # A line inserted at the top moves every position: `#0` now names another request, and resume says so.
    source.write_text('{"prompt": "new"}\n{"prompt": "a"}\n{"prompt": "b"}\n')
    with pytest.raises(ChangedInputError, match="at key '#0'") as caught:
        asyncio.run(run_batch(model, read_inputs(source), output, resume=True, progress_stream=quiet))
    assert "original input" in str(caught.value)
    assert [r.key for r in records.read_records(output)] == ["#0", "#1"]  # nothing was mixed in
    # The file's lock was released: a correct resume still works.
    source.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"}\n')
    fine = asyncio.run(run_batch(model, read_inputs(source), output, resume=True, progress_stream=quiet))
    assert (fine.skipped, fine.ok) == (2, 1)


def test_the_headers_descriptor_set_carries_every_fields_json_name():
    """A reader that builds its types from the header alone (protobuf-es does) needs the JSON names buf and protoc
    always write; without them it knows no `maxOutputTokens` and cannot read the JSON Lines records."""
    image = descriptor_pb2.FileDescriptorSet.FromString(records.ir_descriptor_set())
    unnamed = []

    def visit(message: descriptor_pb2.DescriptorProto, path: str) -> None:
        unnamed.extend(f"{path}.{f.name}" for f in message.field if not f.HasField("json_name"))
        for nested in message.nested_type:
            visit(nested, f"{path}.{nested.name}")

    for file in image.file:
        for message in file.message_type:
            visit(message, f"{file.package}.{message.name}")
    assert unnamed == []
    request = next(f for f in image.file if f.name == "modelir/v1/request.proto")
    sampling = next(m for m in request.message_type if m.name == "SamplingParams")
    assert {f.name: f.json_name for f in sampling.field}["max_output_tokens"] == "maxOutputTokens"


def _add_response_field(file: descriptor_pb2.FileDescriptorProto) -> None:
    (response,) = [m for m in file.message_type if m.name == "Response"]
    response.field.add(
        name="added_later",
        number=999,
        json_name="addedLater",
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )


@pytest.mark.parametrize("first", [JSONL, BINARY])
def test_convert_keeps_every_field_a_newer_writer_wrote_both_ways(tmp_path, first):
    newer = _edited_ir(_add_response_field)
    entry_class = _class(newer, "modelir.v1.RecordFileEntry")
    descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(records.ir_descriptor_set())
    _add_response_field(next(f for f in descriptor_set.file if f.name == "modelir/v1/response.proto"))
    header = entry_class()
    newer_version = f"{IR_SEMVER.major}.{IR_SEMVER.minor + 1}.0"
    header.header.ir_version, header.header.sdk_version = newer_version, "newer"
    header.header.ir_descriptor_set = descriptor_set.SerializeToString()
    written = []
    for key in ("a", "b"):
        record = entry_class()
        record.record.key = key
        record.record.response.added_later = f"kept {key}"
        written.append(record)
    source = tmp_path / ("newer.jsonl" if first == JSONL else "newer.binpb")
    source.write_bytes(b"".join(records.encode_entry(e, first) for e in (header, *written)))

    other = BINARY if first == JSONL else JSONL
    middle = tmp_path / ("middle.binpb" if other == BINARY else "middle.jsonl")
    back = tmp_path / ("back.jsonl" if first == JSONL else "back.binpb")
    with pytest.warns(records.NewerMinorVersionWarning):
        assert convert(source, middle, other) == 2
    with pytest.warns(records.NewerMinorVersionWarning):
        assert convert(middle, back, first) == 2
    assert back.read_bytes() == source.read_bytes()
    data = middle.read_bytes()
    scan_header = records.scan(middle).header
    assert scan_header is not None and scan_header.ir_version == newer_version
    last = _last_entry(data, other)
    entry = records.message_class(scan_header, "modelir.v1.RecordFileEntry")
    decoded = json_format.Parse(last, entry()) if other == JSONL else entry.FromString(last)
    assert decoded.record.response.added_later == "kept b"
