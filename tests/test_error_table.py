"""The one error table (house rule 9): `proto/README.md` says what `errors.ERROR_TABLE` and
`soft_errors.SOFT_REASONS` do, row for row, and every `ErrorReason` has its row."""

from __future__ import annotations

from pathlib import Path

from modelir import errors
from modelir.errors import soft as soft_errors
from modelir.v1 import errors_pb2

README = Path(__file__).resolve().parents[1] / "proto" / "README.md"


def _readme_rows() -> dict[str, tuple[str, str, str, str]]:
    text = README.read_text()
    section = text[text.index("## The error table") :]
    section = section[: section.index("\n## ", 3)]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("ERROR_REASON_"):
            rows[cells[0]] = (cells[1], cells[2], cells[3], cells[4])
    return rows


def _code_rows() -> dict[str, tuple[str, str, str, str]]:
    rows = {}
    for reason, mapping in errors.ERROR_TABLE.items():
        soft = "soft or hard" if reason in soft_errors.SOFT_REASONS else "hard"
        rows[errors_pb2.ErrorReason.Name(reason)] = (
            mapping.grpc_code.name,
            mapping.info_reason,
            "yes" if mapping.retryable else "no",
            soft,
        )
    return rows


def test_the_readme_error_table_is_the_codes_table():
    assert _readme_rows() == _code_rows()


def test_every_error_reason_has_a_row():
    named = {name for name in errors_pb2.ErrorReason.keys() if name != "ERROR_REASON_UNSPECIFIED"}
    assert set(_readme_rows()) == named
    assert set(soft_errors.SOFT_REASONS) <= set(errors.ERROR_TABLE)
