"""Values a newer release may write (a record status, a capability, a logprob basis) are tolerated by every reader
of this release: printed as their number, never a crash (spec rule 2: receivers tolerate unknown values)."""

from __future__ import annotations

from modelir.cli import main
from modelir.errors import capability_name
from modelir.records.files import RecordWriter
from modelir.v1 import record_pb2, response_pb2

_FUTURE_STATUS = 7  # a RecordStatus value a later release may add


def _file_with_a_future_status(path) -> None:
    with RecordWriter.create(path) as writer:
        writer.append(record_pb2.Record(key="k0", status=record_pb2.RECORD_STATUS_OK, response=response_pb2.Response()))
        writer.append(record_pb2.Record(key="k1", status=_FUTURE_STATUS))  # type: ignore[arg-type]


def test_records_show_inspect_and_verify_print_a_newer_status_as_its_number(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    _file_with_a_future_status(path)
    assert main(["records", "show", str(path), "--key", "k1"]) == 0
    assert capsys.readouterr().out.startswith("k1  7")
    main(["records", "inspect", str(path)])  # 1: these bare records lack provenance, which it reports
    assert "records: 2  7: 1  ok: 1" in capsys.readouterr().out
    main(["records", "verify", str(path)])
    assert "2 records, 1 keys with a successful record" in capsys.readouterr().out


def test_a_newer_capability_is_named_by_its_number():
    assert capability_name(1) == "COMPLETION"
    assert capability_name(999) == "999"
