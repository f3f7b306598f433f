"""The release gate (`proto/version_gate.py`, `make spec-version`): a spec change must raise `ir_version`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from modelir.v1 import version_pb2

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("version_gate", ROOT / "proto" / "version_gate.py")
assert _spec is not None and _spec.loader is not None
gate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gate)
# The image of IR 1.0.0, kept beside the moving baseline (`modelir-v1.binpb`, the last release) for good.
RELEASE_1_0 = ROOT / "proto" / "baseline" / "modelir-v1.0.0.binpb"


@pytest.fixture
def baseline() -> descriptor_pb2.FileDescriptorSet:
    return gate.load(RELEASE_1_0)


def _copy(image: descriptor_pb2.FileDescriptorSet) -> descriptor_pb2.FileDescriptorSet:
    return descriptor_pb2.FileDescriptorSet.FromString(image.SerializeToString())


def _file(image: descriptor_pb2.FileDescriptorSet, name: str) -> descriptor_pb2.FileDescriptorProto:
    return next(f for f in image.file if f.name == name)


def _set_version(image: descriptor_pb2.FileDescriptorSet, version: str) -> None:
    for file in image.file:
        if file.options.HasExtension(version_pb2.ir_version):
            file.options.Extensions[version_pb2.ir_version] = version


def _add_field(image: descriptor_pb2.FileDescriptorSet) -> None:
    request = next(m for m in _file(image, "modelir/v1/request.proto").message_type if m.name == "Request")
    request.field.add(name="added_later", number=999, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)


def test_the_baseline_is_consistent_with_itself(baseline):
    assert gate.ir_version_of(baseline) == "1.0.0"
    assert gate.problems(baseline, _copy(baseline)) == []


def test_an_added_field_without_a_bump_is_refused_and_named(baseline):
    current = _copy(baseline)
    _add_field(current)
    [problem] = gate.problems(baseline, current)
    assert "still 1.0.0" in problem and "modelir/v1/request.proto: Request" in problem


def test_an_added_field_with_a_minor_bump_passes(baseline):
    current = _copy(baseline)
    _add_field(current)
    _set_version(current, "1.1.0")
    assert gate.problems(baseline, current) == []


def test_comments_alone_need_no_bump(baseline):
    current = _copy(baseline)
    location = _file(current, "modelir/v1/request.proto").source_code_info.location.add()
    location.leading_comments = " A comment added after the release.\n"
    assert gate.changes(baseline, current) == []


def test_a_version_below_the_baseline_is_refused(baseline):
    current = _copy(baseline)
    _set_version(current, "0.9.0")
    assert "below the baseline" in gate.problems(baseline, current)[0]


def test_the_command_says_what_it_found(baseline, tmp_path, capsys):
    current = _copy(baseline)
    _add_field(current)
    (tmp_path / "current.binpb").write_bytes(current.SerializeToString())
    base_path = RELEASE_1_0
    assert gate.main([str(base_path), str(tmp_path / "current.binpb")]) == 1
    assert "raise it in proto/modelir/v1/version.proto" in capsys.readouterr().err
