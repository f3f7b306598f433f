"""The release gate of the spec: any change of `proto/modelir/v1` against the baseline raises `ir_version` above it.

`buf breaking` proves that a change is additive; it cannot see that an additive change kept the old version, so two
different IRs could both call themselves 1.0.0 and the record resume gate (which compares `major.minor`) could not
tell them apart. This gate compares the current spec, as `buf build` makes it, with the committed baseline image,
ignoring comments (source info) and the `ir_version` option itself:

- the spec changed and `ir_version` is not above the baseline's: fail, naming what changed;
- `ir_version` is below the baseline's: fail;
- otherwise pass (a version raised with no schema change is allowed: a release of comments only).

    python proto/version_gate.py BASELINE.binpb CURRENT.binpb      (make spec-version)
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import descriptor_pb2
from modelir.v1 import version_pb2
from modelir.version import parse_semver

SPEC_PREFIX = "modelir/"


def load(path: str | Path) -> descriptor_pb2.FileDescriptorSet:
    image = descriptor_pb2.FileDescriptorSet()
    image.ParseFromString(Path(path).read_bytes())
    return image


def ir_version_of(image: descriptor_pb2.FileDescriptorSet) -> str:
    """The `(modelir.v1.ir_version)` file option, wherever the spec sets it."""
    for file in image.file:
        if file.options.HasExtension(version_pb2.ir_version):
            return file.options.Extensions[version_pb2.ir_version]
    raise ValueError("the image has no file that sets (modelir.v1.ir_version)")


def _schema(image: descriptor_pb2.FileDescriptorSet) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The spec's files without comments and without the version option: what a version number stands for."""
    files = {}
    for file in image.file:
        if not file.name.startswith(SPEC_PREFIX):
            continue  # well-known imports (google/protobuf/...) are not ours to version
        copy = descriptor_pb2.FileDescriptorProto()
        copy.CopyFrom(file)
        copy.ClearField("source_code_info")
        if copy.options.HasExtension(version_pb2.ir_version):
            copy.options.ClearExtension(version_pb2.ir_version)
        files[file.name] = copy
    return files


def changes(baseline: descriptor_pb2.FileDescriptorSet, current: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """What differs between the two specs, one line per file, comments and the version option aside."""
    old, new = _schema(baseline), _schema(current)
    found = [f"{name}: added" for name in sorted(new.keys() - old.keys())]
    found += [f"{name}: removed" for name in sorted(old.keys() - new.keys())]
    for name in sorted(old.keys() & new.keys()):
        if old[name] != new[name]:
            found.append(f"{name}: {', '.join(_changed_members(old[name], new[name])) or 'options or imports'}")
    return found


def _changed_members(old: descriptor_pb2.FileDescriptorProto, new: descriptor_pb2.FileDescriptorProto) -> list[str]:
    members = []
    for kind in ("message_type", "enum_type", "service", "extension"):
        before = {m.name: m for m in getattr(old, kind)}
        after = {m.name: m for m in getattr(new, kind)}
        members += [name for name in sorted(before.keys() | after.keys()) if before.get(name) != after.get(name)]
    return members


def problems(baseline: descriptor_pb2.FileDescriptorSet, current: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """Why the current spec may not be released as it is; empty when it may."""
    was, now = ir_version_of(baseline), ir_version_of(current)
    if parse_semver(now) < parse_semver(was):
        return [f"ir_version {now} is below the baseline's {was}"]
    changed = changes(baseline, current)
    if changed and parse_semver(now) <= parse_semver(was):
        return [
            f"the spec changed since the baseline ({was}) but ir_version is still {now}: raise it in "
            "proto/modelir/v1/version.proto (an added field or value is a minor bump) and add a changelog entry "
            "in proto/README.md; changed: " + "; ".join(changed)
        ]
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    baseline, current = load(argv[0]), load(argv[1])
    found = problems(baseline, current)
    for line in found:
        print(f"spec-version: {line}", file=sys.stderr)
    if not found:
        print(f"spec-version: ir_version {ir_version_of(current)} (baseline {ir_version_of(baseline)}) is consistent")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
