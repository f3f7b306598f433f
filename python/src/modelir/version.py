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


class IncompatibleServerError(Exception):
    """The server speaks an IR of another major version than this SDK (or reports none): its messages cannot be
    trusted to mean what this SDK's do, so `RemoteModel` refuses it, as the TypeScript, Go and Rust clients do."""

    def __init__(self, server_ir_version: str, client_ir_version: str = IR_VERSION) -> None:
        shown = server_ir_version or "(none reported)"
        super().__init__(
            f"the server speaks modelir IR {shown}, but this SDK speaks IR {client_ir_version}: the major versions "
            "differ, so the SDK refuses it (install a modelir of the server's major version, or talk to a server of "
            "this one's)"
        )
        self.server_ir_version = server_ir_version
        self.client_ir_version = client_ir_version


def check_compatible(server_ir_version: str, client_ir_version: str = IR_VERSION) -> None:
    """Raise `IncompatibleServerError` unless the server's IR has this SDK's major version (any minor: a newer
    minor's fields are unknown fields here, an older one's are all known)."""
    try:
        compatible = parse_semver(server_ir_version).major == parse_semver(client_ir_version).major
    except ValueError:
        compatible = False
    if not compatible:
        raise IncompatibleServerError(server_ir_version, client_ir_version)
