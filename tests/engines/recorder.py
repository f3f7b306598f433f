"""Recording the live engine suites' exchanges as recordings of ours (`conformance/recordings/`), when asked.

`MODELIR_RECORD=1 make test-engines` (or one whole suite under pytest) makes every exchange a live test has
through a `Model` a recording: a generation becomes a `Record` (the IR request as the transport lifted it and
modelir's response with its kept raw exchange: the lowered request body and the engine's answer, body or stream
events), written by `records.files.RecordWriter`; a refused one a `FAILED` record whose response keeps the engine's
error answer; a tokenize or detokenize one JSON line of its IR request, the native answers (each a `RawExchange`
in proto-JSON) and modelir's result (a detokenize refused before any call has no answers); the one call that
learns a model's tokenizer facts (`Model.atokenizer_info`) is a line of its own. `tests/test_recordings_engines.py`
replays every one in `make test`: the lowering must give the recorded request bodies and the lifts modelir's
recorded results, exactly.

Nothing is written without MODELIR_RECORD, so a normal live run leaves the tree as it is. A recording run rewrites
the files of each engine it runs: record whole suites (a partial run drops the other tests' exchanges). The
recording sits beside the transports, not in them: the patched `Model` methods make the same calls with the raw
exchange kept, and a test sees the response it would see unrecorded.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import re
import subprocess
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format
from modelir import accumulate, errors
from modelir.http.executor import Executor
from modelir.model import Model
from modelir.records.files import RecordWriter
from modelir.records.recording import record_of
from modelir.registry import build_transport
from modelir.transports.base import HttpRequest, HttpResponse, Transport
from modelir.v1 import record_pb2, request_pb2, response_pb2

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "conformance" / "recordings"
GENERATE_FILE = "generate.jsonl"
TOKENIZE_FILE = "tokenize.jsonl"
ENABLED = os.environ.get("MODELIR_RECORD", "") not in ("", "0")

# Each live suite: the engine it runs and the variable naming the engine's build (where its version is read).
SUITES = {
    "test_llamacpp_live": ("llama-server", "MODELIR_LLAMA_SERVER"),
    "test_llama_cpp_python_live": ("llama-cpp-python", "MODELIR_LLAMA_CPP_PYTHON"),
    "test_ollama_live": ("ollama", "MODELIR_OLLAMA"),
    "test_vllm_live": ("vllm", "MODELIR_VLLM"),
}

_built: dict[int, tuple[str, dict[str, Any]]] = {}  # id(transport) -> its registry name and options
# The native exchanges of the call running in this task (tokenize), and the error answers it mapped.
_exchanges: contextvars.ContextVar[list[tuple[HttpRequest, HttpResponse]] | None] = contextvars.ContextVar(
    "exchanges", default=None
)


def transport(name: str, **options: Any) -> Transport:
    """Transport `name` built from `options` as a configuration entry would; remembered, so that a recording says
    how the replay builds it again."""
    built = build_transport(name, options)
    _built[id(built)] = (name, options)
    return built


def engine_version(engine: str, build: str) -> str:
    """The engine's version: llama-server names its llama.cpp commit; the others are cached under their version."""
    if engine == "llama-server":
        said = subprocess.run([build, "--version"], capture_output=True, text=True, timeout=30)
        found = re.search(r"commit ([0-9a-f]+)", said.stdout + said.stderr)
    else:
        found = re.search(r"-(\d+\.\d+\.\d+)/", build)
    return found.group(1) if found else "unknown"


class Recorder:
    """The recording files of one session: one directory per engine, `<engine>-<version>`."""

    def __init__(self) -> None:
        self.engine: str | None = None  # the engine of the test running now
        self.test = ""
        self._count = 0
        self._folders: dict[str, Path] = {}
        self._writers: dict[str, tuple[RecordWriter, str]] = {}  # engine -> writer, its transport
        self._tokenize: dict[str, Any] = {}

    def begin(self, module: str, test: str) -> None:
        suite = SUITES.get(module)
        self.engine, self.test, self._count = (suite[0] if suite else None), test, 0
        if suite and suite[0] not in self._folders and os.environ.get(suite[1]):
            self._folders[suite[0]] = RECORDINGS / f"{suite[0]}-{engine_version(suite[0], os.environ[suite[1]])}"

    def _folder(self) -> Path | None:
        folder = self._folders.get(self.engine) if self.engine else None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _key(self) -> str:
        self._count += 1
        return f"{self.test}#{self._count}"

    def record(self, model: Model, record: record_pb2.Record) -> None:
        folder = self._folder()
        if folder is None or self.engine is None:
            return
        name, options = _built.get(id(model.transport), (model.transport.name, {}))
        if self.engine not in self._writers:
            (folder / GENERATE_FILE).unlink(missing_ok=True)
            metadata = {"engine": folder.name, "transport": name, "transport_options": orjson.dumps(options).decode()}
            self._writers[self.engine] = (RecordWriter.create(folder / GENERATE_FILE, run_metadata=metadata), name)
        writer, recorded = self._writers[self.engine]
        if name != recorded:
            raise RuntimeError(f"{folder.name}: the recording is of {recorded}; this test used {name}")
        record.key = self._key()
        writer.append(record)

    def record_tokenize(self, line: dict[str, Any]) -> None:
        folder = self._folder()
        if folder is None or self.engine is None:
            return
        if self.engine not in self._tokenize:
            self._tokenize[self.engine] = (folder / TOKENIZE_FILE).open("wb")
        self._tokenize[self.engine].write(orjson.dumps({"key": self._key(), **line}) + b"\n")

    def close(self) -> None:
        for writer, _ in self._writers.values():
            writer.close()
        for handle in self._tokenize.values():
            handle.close()


RECORDER = Recorder()


def raw_of(native: HttpRequest, answer: HttpResponse, transport_name: str) -> response_pb2.RawExchange:
    kept = response_pb2.RawExchange(
        transport=transport_name, http_status=answer.status, body=answer.body, request_body=native.body
    )
    kept.content_type = answer.headers.get("content-type", "")
    return kept


def _asking_raw(prepared: Any) -> Any:
    asked = request_pb2.Request()
    asked.CopyFrom(prepared.request)
    asked.include_raw = asked.include_lowered_request = True
    return dataclasses.replace(prepared, request=asked)


def _failed(model: Model, prepared: Any, exc: errors.ModelError, kept: list) -> record_pb2.Record:
    """A refused call's record: the failure, and the engine's error answer as the response's raw exchange."""
    record = record_of(model, prepared.request, failure=exc)
    native, answer = kept[-1]
    record.response.raw.CopyFrom(raw_of(native, answer, model.transport.name))
    return record


def install() -> None:
    """Patch `Model` (and the executor's unary send) so that calls are recorded: the session's conftest does,
    under MODELIR_RECORD."""
    run_transport, stream_transport = Model._run_transport, Model._stream_transport
    tokenize, detokenize, send = Model.atokenize_request, Model.adetokenize, Executor.send
    tokenizer_info = Model.atokenizer_info

    async def keeping_send(self, native, *, error_from, **kwargs):
        kept = _exchanges.get()
        if kept is None:
            return await send(self, native, error_from=error_from, **kwargs)

        def mapped(answer: HttpResponse) -> errors.ModelError:
            kept.append((native, answer))
            return error_from(answer)

        sent = await send(self, native, error_from=mapped, **kwargs)
        kept.append((native, sent.response))
        return sent

    async def recorded_run(self, prepared, deadline):
        kept: list[tuple[HttpRequest, HttpResponse]] = []
        token = _exchanges.set(kept)
        try:
            response, attempts = await run_transport(self, _asking_raw(prepared), deadline)
        except errors.ModelError as exc:
            if kept:
                RECORDER.record(self, _failed(self, prepared, exc, kept))
            raise
        finally:
            _exchanges.reset(token)
        RECORDER.record(self, record_of(self, prepared.request, response))
        if not prepared.request.include_raw:
            response.ClearField("raw")
        return response, attempts

    async def recorded_stream(self, prepared, deadline, attempts) -> AsyncGenerator[Any, None]:
        events = []
        errored: list[tuple[HttpRequest, HttpResponse]] = []

        def mapped(answer: HttpResponse) -> errors.ModelError:  # a stream refused before its first event
            errored.append((prepared.native, answer))
            return error_from(answer)

        error_from, self._error_from = self._error_from, mapped
        try:
            async for event in stream_transport(self, _asking_raw(prepared), deadline, attempts):
                if not events:
                    self._error_from = error_from
                kept = type(event)()
                kept.CopyFrom(event)
                events.append(kept)
                if event.WhichOneof("event") == "end" and not prepared.request.include_raw:
                    event.end.ClearField("raw")
                yield event
        except errors.ModelError as exc:
            if errored and not events:
                RECORDER.record(self, _failed(self, prepared, exc, errored))
            raise
        finally:
            self._error_from = error_from
        RECORDER.record(self, record_of(self, prepared.request, accumulate(events)))

    async def recorded_tokenize(self, request):
        kept: list[tuple[HttpRequest, HttpResponse]] = []
        token = _exchanges.set(kept)
        line: dict[str, Any] = {"operation": "tokenize", "request": json_format.MessageToDict(request)}
        try:
            out = await tokenize(self, request)
            line["result"] = json_format.MessageToDict(out)
            return out
        except errors.ModelError as exc:
            line["error"] = json_format.MessageToDict(exc.to_response_error())
            raise
        finally:
            _exchanges.reset(token)
            line["answers"] = [json_format.MessageToDict(raw_of(n, a, self.transport.name)) for n, a in kept]
            RECORDER.record_tokenize(line)

    async def recorded_detokenize(self, token_ids):
        kept: list[tuple[HttpRequest, HttpResponse]] = []
        token = _exchanges.set(kept)
        line: dict[str, Any] = {"operation": "detokenize", "token_ids": list(token_ids)}
        try:
            out = await detokenize(self, token_ids)
            line["result"] = out
            return out
        except errors.ModelError as exc:
            line["error"] = json_format.MessageToDict(exc.to_response_error())
            raise
        finally:
            _exchanges.reset(token)
            line["answers"] = [json_format.MessageToDict(raw_of(n, a, self.transport.name)) for n, a in kept]
            RECORDER.record_tokenize(line)

    async def recorded_tokenizer_info(self):
        kept: list[tuple[HttpRequest, HttpResponse]] = []
        token = _exchanges.set(kept)  # its own line, even when a detokenize asks for it
        try:
            out = await tokenizer_info(self)
        finally:
            _exchanges.reset(token)
        if kept:  # asked the engine (once per model: then kept)
            transport = self.transport
            line: dict[str, Any] = {"operation": "tokenizer_info", "model": transport.provider_model or self.name}
            line["result"] = None if out is None else json_format.MessageToDict(out)
            line["answers"] = [json_format.MessageToDict(raw_of(n, a, transport.name)) for n, a in kept]
            RECORDER.record_tokenize(line)
        return out

    Executor.send = keeping_send  # type: ignore[method-assign]
    Model.atokenizer_info = recorded_tokenizer_info  # type: ignore[method-assign]
    Model._run_transport = recorded_run  # type: ignore[method-assign]
    Model._stream_transport = recorded_stream  # type: ignore[method-assign]
    Model.atokenize_request = recorded_tokenize  # type: ignore[method-assign]
    Model.adetokenize = recorded_detokenize  # type: ignore[method-assign]
