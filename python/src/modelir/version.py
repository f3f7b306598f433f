"""The IR version (read from the spec's own descriptor) and the SDK version, with the compatibility rule."""

from __future__ import annotations

import re
from importlib import metadata
from typing import NamedTuple

from modelir.v1 import version_pb2


class SemVer(NamedTuple):
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def series(self) -> str:
        """The `major.minor` series; records of one series are interchangeable."""
        return f"{self.major}.{self.minor}"


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:[-+].*)?$")


def parse_semver(text: str) -> SemVer:
    match = _SEMVER.match(text)
    if not match:
        raise ValueError(f"not a semantic version: {text!r}")
    return SemVer(*(int(g) for g in match.groups()))


def _read_ir_version() -> str:
    return version_pb2.DESCRIPTOR.GetOptions().Extensions[version_pb2.ir_version]


IR_VERSION: str = _read_ir_version()
IR_SEMVER: SemVer = parse_semver(IR_VERSION)

try:
    SDK_VERSION: str = metadata.version("modelir")
except metadata.PackageNotFoundError:  # running from a source tree that was not installed
    SDK_VERSION = "0+unknown"
