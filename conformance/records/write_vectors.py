"""Writes the record conformance vectors of this SDK's IR release (`conformance/records/v<IR_VERSION>/`).

Each release writes its vectors once, with the SDK's own `RecordWriter`, and never rewrites them: a later
release adds its own directory beside the earlier ones, and every reader in every language reads them all. The
files end in a torn entry (a crash mid-append) and hold a record status and a finish reason no release defines
(an unknown enum value, as a newer writer would write). `manifest.json` says what each must read as.

    .venv/bin/python conformance/records/write_vectors.py      (refuses to overwrite an existing directory)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from modelir.records.files import BINARY, JSONL, RecordWriter, encode_entry
from modelir.v1 import content_pb2, embedding_pb2, errors_pb2, record_pb2, request_pb2, response_pb2
from modelir.version import IR_VERSION, SDK_VERSION

HERE = Path(__file__).resolve().parent
UNKNOWN_STATUS = 7  # no release defines RecordStatus 7: readers keep the number
UNKNOWN_FINISH_REASON = 42  # nor FinishReason 42


def _provenance() -> record_pb2.Provenance:
    return record_pb2.Provenance(
        ir_version=IR_VERSION, sdk_version=SDK_VERSION, transport="reference", configured_model="reference"
    )


def _answer(text: str, finish_reason: int) -> response_pb2.Response:
    message = content_pb2.Message(role=content_pb2.ROLE_ASSISTANT, parts=[content_pb2.Part(text=text)])
    choice = response_pb2.Choice(index=0, message=message, finish_reason=finish_reason)
    return response_pb2.Response(model="reference", choices=[choice])


def _request(prompt: str) -> request_pb2.Request:
    return request_pb2.Request(model="reference", prompt=prompt)


def records() -> list[record_pb2.Record]:
    """The records of this release's vectors: those of every release, then what this release added."""
    ok = record_pb2.Record(
        key="greeting",
        request=_request("Say hello."),
        response=_answer("Hello, world.", response_pb2.FINISH_REASON_STOP),
        status=record_pb2.RECORD_STATUS_OK,
        provenance=_provenance(),
    )
    failed = record_pb2.Record(
        key="refused",
        request=_request("Say nothing."),
        status=record_pb2.RECORD_STATUS_FAILED,
        failure=errors_pb2.ResponseError(reason=errors_pb2.ERROR_REASON_RATE_LIMITED, message="slow down"),
        provenance=_provenance(),
    )
    unkeyed = record_pb2.Record(  # the writer gives it its position as key: "#2"
        request=_request("Count to three."),
        response=_answer("One, two, ", response_pb2.FINISH_REASON_LENGTH),
        status=record_pb2.RECORD_STATUS_PARTIAL,
        provenance=_provenance(),
    )
    future = record_pb2.Record(
        key="future",
        request=_request("Say something new."),
        response=_answer("Ünïcödé ✓ from the future", UNKNOWN_FINISH_REASON),
        status=UNKNOWN_STATUS,
        provenance=_provenance(),
    )
    written = [ok, failed, unkeyed, future]
    if "embed_request" in record_pb2.Record.DESCRIPTOR.fields_by_name:  # IR 1.1 on: what 1.0 readers do not know
        ok.response.choices[0].native_json = '{"avgLogprobs":-0.25}'
        written.append(
            record_pb2.Record(  # neither request nor response: readers say how they show it
                key="embedded",
                embed_request=embedding_pb2.EmbedRequest(
                    model="reference", inputs=[embedding_pb2.EmbedInput(text="Hello")]
                ),
                embed_response=embedding_pb2.EmbedResponse(
                    model="reference",
                    embeddings=[embedding_pb2.Embedding(index=0, values=[0.6, -0.8])],
                    usage=response_pb2.Usage(input_token_count=1),
                ),
                status=record_pb2.RECORD_STATUS_OK,
                provenance=_provenance(),
            )
        )
    return written


def _text(record: record_pb2.Record) -> str:
    if not record.response.choices:
        return ""
    return "".join(part.text for part in record.response.choices[0].message.parts if part.HasField("text"))


def write(directory: Path) -> dict:
    directory.mkdir(parents=False, exist_ok=False)
    written = records()
    torn = record_pb2.Record(key="torn", status=record_pb2.RECORD_STATUS_OK, provenance=_provenance())
    files = []
    for fmt, name in ((JSONL, "records.jsonl"), (BINARY, "records.binpb")):
        path = directory / name
        with RecordWriter.create(path, fmt=fmt, run_metadata={"vector": f"{IR_VERSION}/{name}"}) as writer:
            for record in written:
                writer.append(record)
        whole = encode_entry(record_pb2.RecordFileEntry(record=torn), fmt)
        cut = whole[: len(whole) // 2]  # a crash mid-append: half of one more entry
        with path.open("ab") as handle:
            handle.write(cut)
        keys = [record.key or f"#{index}" for index, record in enumerate(written)]
        files.append(
            {
                "path": f"v{IR_VERSION}/{name}",
                "format": fmt,
                "ir_version": IR_VERSION,
                "run_metadata": {"vector": f"{IR_VERSION}/{name}"},
                "torn_tail_bytes": len(cut),
                "records": [
                    {"key": key, "status": int(record.status), "text": _text(record)}
                    for key, record in zip(keys, written, strict=True)
                ],
            }
        )
    return {"files": files}


def main() -> int:
    directory = HERE / f"v{IR_VERSION}"
    if directory.exists():
        print(f"{directory} exists: a release's vectors are written once", file=sys.stderr)
        return 1
    manifest_path = HERE / "manifest.json"
    manifest = json.loads(manifest_path.read_text())  # its description and rules stay; files are added
    manifest["files"] += write(directory)["files"]
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
