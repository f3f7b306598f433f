"""Records: record files (`files`; `descriptors`, the types a header carries; `convert`; `provenance`; `errors`),
a `Record` with its provenance (`recording`), the kept raw exchange (`raw_exchange`) and the varints that frame
binary files (`varint`).

The record-file functions are re-exported here, so `modelir.records.read_records` reads a file.
"""

from modelir.records.convert import convert
from modelir.records.files import (
    BINARY,
    JSONL,
    NewerMinorVersionWarning,
    OtherSeriesError,
    RecordFileError,
    RecordWriter,
    check_readable,
    check_resumable,
    format_of,
    read_header,
    read_records,
    scan,
)
from modelir.records.provenance import provenance_problems

__all__ = [
    "BINARY",
    "JSONL",
    "NewerMinorVersionWarning",
    "OtherSeriesError",
    "RecordFileError",
    "RecordWriter",
    "check_readable",
    "check_resumable",
    "convert",
    "format_of",
    "provenance_problems",
    "read_header",
    "read_records",
    "scan",
]
