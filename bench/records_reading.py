"""Reading record files: records per second through `records.read_records` against a bare JSON Lines parse
(`orjson.loads` per line) of the same file, and how soon the first record arrives.

The file holds 3,000 records of a reference chat with 64 sampled tokens and top-5 logprobs each (the shape of an
eval run's records), written once by `RecordWriter`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import orjson
from modelir import Model, ReferenceModel, build_request, record_of
from modelir.records import files as records
from timing import chained

RECORDS = 3_000


def _write(path: Path) -> None:
    model = Model(ReferenceModel(), name="reference")
    with records.RecordWriter.create(path, fsync_interval=60) as writer:
        for i in range(RECORDS):
            request = build_request(
                "reference", messages=f"Question {i}?", max_output_tokens=64, top_logprobs=5, seed=i
            )
            writer.append(record_of(model, request, response=model.run(request), key=f"q{i}"))


def run(repeat: int) -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.jsonl"
        _write(path)

        def bare() -> int:
            with path.open("rb") as handle:
                return sum(1 for line in handle if orjson.loads(line))

        def ours(_: object) -> int:
            return sum(1 for _ in records.read_records(path))

        rounds = max(3, repeat // 5)
        read, parse, ratio = chained(bare, ours, rounds)
        first = []
        for _ in range(rounds):
            start = time.perf_counter()
            next(iter(records.read_records(path)))
            first.append(time.perf_counter() - start)
        size = path.stat().st_size
    first_ms = sorted(first)[len(first) // 2] * 1e3
    return [
        (
            f"read_records, {RECORDS:,} records ({size / 1e6:.1f} MB JSON Lines) vs orjson.loads per line",
            f"{RECORDS / read:,.0f} records/s vs {RECORDS / parse:,.0f} lines/s",
            f"{ratio:.1f}x the bare parse's time",
        ),
        (
            "read_records: the first record of that file",
            f"{first_ms:.1f} ms",
            f"{first_ms / 1e3 / read:.4f}x the whole read",
        ),
    ]
