"""Reading a record file streams it: `read_records` hands over the first record before the rest of the file is read
(and `modelir records show | head` stops early), with the torn-tail and unreadable-entry rules of `scan`."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from modelir import Model, ReferenceModel, build_request, record_of
from modelir.records import files as records
from modelir.records.files import BINARY, JSONL, RecordWriter


def _write(path: Path, count: int, fmt: str | None = None) -> None:
    model = Model(ReferenceModel(), name="reference")
    request = build_request("reference", prompt="x", max_output_tokens=3)
    response = model.run(request)
    with RecordWriter.create(path, fmt=fmt) as writer:
        for i in range(count):
            writer.append(record_of(model, request, response=response, key=f"k{i}"))


class CountingReads:
    """A binary file that counts the bytes taken from it, however they are taken."""

    taken = 0

    def __init__(self, handle) -> None:
        self.handle = handle

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        CountingReads.taken += len(data)
        return data

    def read_bytes(self) -> bytes:
        return self.read()

    def __iter__(self):
        for line in self.handle:
            CountingReads.taken += len(line)
            yield line

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


@pytest.mark.parametrize("fmt", [JSONL, BINARY])
def test_the_first_record_comes_before_the_file_is_read(tmp_path, monkeypatch, fmt):
    path = tmp_path / f"many.{fmt}"
    _write(path, 2000, fmt)
    size = path.stat().st_size
    real_open = Path.open

    def counting_open(self, mode="r", *args, **kwargs):
        handle = real_open(self, mode, *args, **kwargs)
        return CountingReads(handle) if self == path and mode == "rb" else handle

    monkeypatch.setattr(Path, "open", counting_open)
    monkeypatch.setattr(Path, "read_bytes", lambda self: counting_open(self, "rb").read())
    CountingReads.taken = 0
    first = next(iter(records.read_records(path)))
    assert first.key == "k0"
    assert CountingReads.taken < size / 4, f"took {CountingReads.taken} of {size} bytes for one record"
    assert records.read_header(path) is not None


@pytest.mark.parametrize("fmt", [JSONL, BINARY])
def test_streaming_keeps_the_torn_tail_and_skip_rules(tmp_path, fmt):
    path = tmp_path / f"torn.{fmt}"
    _write(path, 3, fmt)
    with path.open("ab") as handle:
        handle.write(b'{"record": {"key": "half' if fmt == JSONL else b"\x80")  # a write cut short
    scan = records.scan(path)
    assert [r.key for r in scan.records] == ["k0", "k1", "k2"]
    assert scan.torn_bytes > 0 and scan.problems[0].startswith("torn last entry")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r.key for r in records.read_records(path)] == ["k0", "k1", "k2"]
    assert [str(w.message) for w in caught] == [f"{path}: {scan.problems[0]}"]


def test_an_unreadable_entry_in_the_middle_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "bad.jsonl"
    _write(path, 2)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1] + b"not json\n" + lines[2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r.key for r in records.read_records(path)] == ["k0", "k1"]
    assert "entry 2" in str(caught[0].message) and "cannot be parsed; skipped" in str(caught[0].message)
    assert records.scan(path).problems == [str(caught[0].message).split(": ", 1)[1]]


def test_a_file_that_does_not_start_with_a_header_is_refused_at_once(tmp_path):
    path = tmp_path / "no-header.jsonl"
    _write(path, 1)
    path.write_bytes(path.read_bytes().split(b"\n", 1)[1])
    with pytest.raises(records.RecordFileError, match="no header entry first"):
        next(iter(records.read_records(path)))


def test_records_show_piped_into_head_stops_early(tmp_path):
    path = tmp_path / "big.jsonl"
    _write(path, 3000)
    shell = f"{sys.executable} -m modelir.cli records show {path} | head -2"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["k0", "k1"]
    assert "Traceback" not in done.stderr
