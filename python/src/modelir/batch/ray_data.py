"""Calling a modelir model from a Ray Data pipeline: `dataset.map_batches(ModelCaller, ...)`.

```python
import ray
from modelir.batch.ray_data import ModelCaller, write_records

ds = ray.data.read_json("requests.jsonl")           # a `request` column (proto-JSON object or string)
out = ds.map_batches(ModelCaller, fn_constructor_kwargs={"model": "gpt-mini", "config": "fleet.yaml"},
                     concurrency=4, batch_size=64)  # or {"model": ..., "target": "dns:///modelir:50051"}
write_records(out, "records.jsonl")                 # the `record` column into a record file
```

Each batch gains `key` (given in a `key` column, or derived from the request as batch keys are), `status`
(`OK`, `PARTIAL`, `FAILED`), `text` (the first choice's text) and `record` (the serialized `Record`, with
provenance, exactly as `modelir run` writes it). A failed call is a row with status `FAILED`, never a lost one.
Ray is the `ray` extra; nothing in the core SDK imports this module.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from google.protobuf import json_format

from modelir.batch.calls import call_many
from modelir.batch.inputs import request_key
from modelir.batch.model_spec import ModelSpec
from modelir.records.files import RecordWriter
from modelir.v1 import capabilities_pb2, record_pb2, request_pb2
from modelir.writing.names import enum_name

__all__ = ["ModelCaller", "parse_request", "write_records"]


def parse_request(value: Any) -> request_pb2.Request:
    """A request cell: serialized bytes, a proto-JSON string, or a proto-JSON object (a dict)."""
    if isinstance(value, request_pb2.Request):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return request_pb2.Request.FromString(bytes(value))
    if isinstance(value, str):
        value = orjson.loads(value)
    if isinstance(value, Mapping):
        return json_format.ParseDict(dict(value), request_pb2.Request())
    raise TypeError(f"a request cell must be bytes, a proto-JSON string or object, not {type(value).__name__}")


class ModelCaller:
    """A callable class for `map_batches`: opens the model once per Ray actor, runs each batch concurrently."""

    def __init__(
        self,
        model: str,
        *,
        config: str | None = None,
        target: str | None = None,
        concurrency: int = 8,
        request_column: str = "request",
        key_column: str = "key",
    ) -> None:
        spec = ModelSpec(model=model, target=target)
        if config is not None:
            spec = ModelSpec.from_config_file(config, model)
        self.model = spec.open()
        self.concurrency = max(1, concurrency)
        self.request_column = request_column
        self.key_column = key_column
        self._manifest: capabilities_pb2.CapabilityManifest | None = None
        # The model's connections belong to one event loop, kept alive between batches in its own thread.
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="modelir-ray-loop", daemon=True).start()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.request_column not in batch:
            raise KeyError(f"the batch has no {self.request_column!r} column (columns: {sorted(batch)})")
        requests = [parse_request(cell) for cell in batch[self.request_column]]
        given = batch.get(self.key_column)
        keys = [str(given[i]) if given is not None else request_key(r) for i, r in enumerate(requests)]
        records = asyncio.run_coroutine_threadsafe(self._run(keys, requests), self._loop).result()
        out = dict(batch)
        out[self.key_column] = np.array(keys, dtype=object)
        out["status"] = np.array([enum_name(record_pb2.RecordStatus, r.status).upper() for r in records], dtype=object)
        out["text"] = np.array([_first_text(r) for r in records], dtype=object)
        out["record"] = np.array([r.SerializeToString() for r in records], dtype=object)
        return out

    async def _run(self, keys: list[str], requests: list[request_pb2.Request]) -> list[record_pb2.Record]:
        if self._manifest is None:
            self._manifest = await self.model.acapabilities()
        items = [(key, request, 0) for key, request in zip(keys, requests, strict=True)]
        return await call_many(self.model, self._manifest, items, self.concurrency)


def _first_text(record: record_pb2.Record) -> str:
    if record.status == record_pb2.RECORD_STATUS_FAILED or not record.response.choices:
        return ""
    parts = record.response.choices[0].message.parts
    return "".join(p.text for p in parts if p.WhichOneof("content") == "text")


def write_records(rows: Any, output: str | Path, *, run_metadata: dict[str, str] | None = None) -> int:
    """Write the `record` column of a Ray dataset (or any iterable of rows) into a new record file."""
    iterable: Iterable[Mapping[str, Any]] = rows.iter_rows() if hasattr(rows, "iter_rows") else rows
    count = 0
    with RecordWriter.create(output, run_metadata=run_metadata) as writer:
        for row in iterable:
            writer.append(record_pb2.Record.FromString(row["record"]))
            count += 1
    return count
