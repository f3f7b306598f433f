"""The IR's own types in a record file's header: the descriptor set this SDK writes (with JSON names), and message
classes built from a header's set, which decode every field the writer knew, also those this SDK does not."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import Message

from modelir.records.errors import RecordFileError
from modelir.v1 import (
    capabilities_pb2,
    content_pb2,
    errors_pb2,
    logprobs_pb2,
    record_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    stream_pb2,
    version_pb2,
)

# Every file of the IR this SDK writes; the descriptor set in a header holds them and all their imports.
_IR_FILES: tuple[FileDescriptor, ...] = tuple(
    module.DESCRIPTOR
    for module in (
        version_pb2,
        capabilities_pb2,
        content_pb2,
        errors_pb2,
        logprobs_pb2,
        request_pb2,
        response_pb2,
        stream_pb2,
        record_pb2,
        service_pb2,
    )
)
_DESCRIPTOR_SET: bytes | None = None


def ir_descriptor_set() -> bytes:
    """The serialized `FileDescriptorSet` of this SDK's IR: every `modelir/v1` file and its imports, each file
    after the files it imports (so a reader can add them to a pool in order)."""
    global _DESCRIPTOR_SET
    if _DESCRIPTOR_SET is None:
        ordered: list[FileDescriptor] = []
        seen: set[str] = set()

        def visit(file: FileDescriptor) -> None:
            if file.name in seen:
                return
            seen.add(file.name)
            for dependency in file.dependencies:
                visit(dependency)
            ordered.append(file)

        for file in _IR_FILES:
            visit(file)
        descriptor_set = descriptor_pb2.FileDescriptorSet()
        for file in ordered:
            proto = descriptor_set.file.add()
            file.CopyToProto(proto)
            for message in proto.message_type:
                _set_json_names(message, file.message_types_by_name[message.name])
        _DESCRIPTOR_SET = descriptor_set.SerializeToString()
    return _DESCRIPTOR_SET


def _set_json_names(proto: descriptor_pb2.DescriptorProto, live: Descriptor) -> None:
    """Write every field's JSON name into its copy. `CopyToProto` leaves `json_name` unset (buf and protoc always
    set it), and a reader that builds its types from the header alone (protobuf-es in TypeScript) then knows no
    camelCase names and cannot read the JSON Lines records the header describes."""
    for member in proto.field:
        member.json_name = live.fields_by_name[member.name].json_name
    for nested in proto.nested_type:
        _set_json_names(nested, live.nested_types_by_name[nested.name])


def message_class(header: record_pb2.RecordHeader, full_name: str = "modelir.v1.Record") -> type[Message]:
    """A message class built from the header's own descriptor set: it decodes (binary and proto-JSON) every field
    the writer knew, also those this SDK does not. Decode an entry's bytes or line with it, e.g.
    `message_class(header, "modelir.v1.RecordFileEntry").FromString(raw)`."""
    if not header.ir_descriptor_set:
        raise RecordFileError("the record file's header carries no descriptor set (written before IR 1.0.0?)")
    descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(header.ir_descriptor_set)
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_set.file:
        pool.Add(file)
    try:
        descriptor = pool.FindMessageTypeByName(full_name)
    except KeyError:
        raise RecordFileError(f"the record file's descriptor set has no message {full_name!r}") from None
    return message_factory.GetMessageClass(descriptor)
