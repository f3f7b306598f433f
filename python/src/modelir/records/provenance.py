"""What a record must say of where it came from, and the check `modelir records verify` runs."""

from __future__ import annotations

from modelir.v1 import record_pb2

# What a reader needs to know, years later, of where a record came from: which IR and SDK wrote it, through which
# transport, for which configured model. A record without them cannot be attributed; `verify` names each.
REQUIRED_PROVENANCE = ("ir_version", "sdk_version", "transport", "configured_model")
_PROVENANCE_PROBLEMS_SHOWN = 20


def provenance_problems(records: list[record_pb2.Record]) -> list[str]:
    """The records whose provenance is empty or lacks a field of `REQUIRED_PROVENANCE`, one line each (the first
    twenty, then how many more), for `modelir records verify`."""
    lines = []
    for index, record in enumerate(records):
        provenance = record.provenance
        if not record.HasField("provenance") or not provenance.ListFields():
            lines.append(f"record {index} (key {record.key!r}) has empty provenance")
            continue
        absent = [name for name in REQUIRED_PROVENANCE if not getattr(provenance, name)]
        if absent:
            lines.append(f"record {index} (key {record.key!r}) has no provenance {', '.join(absent)}")
    if len(lines) > _PROVENANCE_PROBLEMS_SHOWN:
        hidden = len(lines) - _PROVENANCE_PROBLEMS_SHOWN
        lines = [*lines[:_PROVENANCE_PROBLEMS_SHOWN], f"... and {hidden} more records with incomplete provenance"]
    return lines
