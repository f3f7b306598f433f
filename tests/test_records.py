"""Record files, batch runs that survive SIGKILL, torn tails, and the resume version gate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
from google.protobuf import json_format
from modelir import Model, ReferenceModel, build_request
from modelir.batch import read_inputs, run_batch
from modelir.records import files as records
from modelir.records.files import RecordFileError, RecordWriter
from modelir.v1 import record_pb2, response_pb2

MODELIR = [sys.executable, "-m", "modelir.cli"]


def _inputs(path, count: int, *, tokens: int = 8, top_k: int = 0) -> None:
    with path.open("w") as handle:
        for i in range(count):
            request = {"prompt": f"prompt number {i}", "sampling": {"maxOutputTokens": tokens, "seed": str(i)}}
            if top_k:
                request["logprobOptions"] = {"topLogprobCount": top_k}
            handle.write(json.dumps({"key": f"k{i:05d}", "request": request}) + "\n")


def _successful_keys(path) -> list[str]:
    return [r.key for r in records.read_records(path) if r.status == record_pb2.RECORD_STATUS_OK]


@pytest.mark.timeout(600)  # 3,000 records through two runs: ~45 s idle, several times that on a loaded machine
def test_sigkill_mid_run_then_resume_gives_one_record_per_key(tmp_path):
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    count = 3000
    _inputs(source, count, tokens=32, top_k=5)
    command = [*MODELIR, "run", "--model", "reference", "--input", str(source), "--output", str(output)]
    process = subprocess.Popen([*command, "--concurrency", "4"], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it once it has written a fair share, but not everything
        time.sleep(0.05)
        if output.exists() and output.stat().st_size > 1_000_000:
            break
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    written_before = len(_successful_keys(output))
    assert 0 < written_before < count, "the run must be killed mid-way for this test to mean anything"

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    keys = _successful_keys(output)
    assert sorted(keys) == [f"k{i:05d}" for i in range(count)]  # none lost, none duplicated
    assert f"{count - written_before} ok" in resumed.stderr or "repaired" in resumed.stderr
    verify = subprocess.run([*MODELIR, "records", "verify", str(output)], capture_output=True, text=True)
    assert verify.returncode == 0 and verify.stdout.strip().endswith("ok")


def test_torn_last_line_is_detected_reported_and_repaired(tmp_path):
    output = tmp_path / "out.jsonl"
    model = Model(ReferenceModel(), name="reference")
    inputs = [(f"k{i}", build_request("", prompt=f"p{i}", max_output_tokens=4)) for i in range(5)]
    import asyncio

    asyncio.run(run_batch(model, inputs[:3], output, progress_stream=open(os.devnull, "w")))
    whole = output.read_bytes()
    output.write_bytes(whole[:-40])  # a crash in the middle of the last line
    scan = records.scan(output)
    assert scan.torn_bytes > 0 and "torn last entry" in scan.problems[0]
    assert [r.key for r in scan.records] == ["k0", "k1"]
    verify = subprocess.run([*MODELIR, "records", "verify", str(output)], capture_output=True, text=True)
    assert verify.returncode == 1 and "torn last entry" in verify.stdout

    summary = asyncio.run(run_batch(model, inputs, output, resume=True, progress_stream=open(os.devnull, "w")))
    assert (summary.skipped, summary.ok) == (2, 3)
    again = records.scan(output)
    assert not again.problems and [r.key for r in again.records] == ["k0", "k1", "k2", "k3", "k4"]


def _file_with_version(tmp_path, version: str):
    path = tmp_path / f"v{version}.jsonl"
    header = record_pb2.RecordFileEntry(header=record_pb2.RecordHeader(ir_version=version, sdk_version="x"))
    record = record_pb2.RecordFileEntry(record=record_pb2.Record(key="a", status=record_pb2.RECORD_STATUS_OK))
    path.write_text(
        json_format.MessageToJson(header, indent=None) + "\n" + json_format.MessageToJson(record, indent=None) + "\n"
    )
    return path


def test_resume_gate_refuses_another_major_and_accepts_a_patch_and_a_newer_minor(tmp_path):
    from modelir.version import IR_SEMVER

    other_major = f"{IR_SEMVER.major + 1}.0.0"
    with pytest.raises(RecordFileError) as caught:
        RecordWriter.resume(_file_with_version(tmp_path, other_major))
    message = str(caught.value)
    assert other_major in message and str(IR_SEMVER) in message and "new output file" in message
    assert "delete" not in message
    for version in (
        f"{IR_SEMVER.major}.{IR_SEMVER.minor}.{IR_SEMVER.patch + 7}",
        f"{IR_SEMVER.major}.{IR_SEMVER.minor + 1}.0",  # a newer minor's header already describes our records
    ):
        path = _file_with_version(tmp_path, version)
        writer, scan = RecordWriter.resume(path)
        writer.append(record_pb2.Record(key="b", status=record_pb2.RECORD_STATUS_OK))
        writer.close()
        assert [r.key for r in scan.records] == ["a"]
        assert records.read_header(path).ir_version == version  # the header is left as it was
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", records.NewerMinorVersionWarning)
            assert [r.key for r in records.read_records(path)] == ["a", "b"]


def test_newer_minor_is_readable_with_a_warning_and_another_major_is_refused(tmp_path):
    from modelir.version import IR_SEMVER

    newer = _file_with_version(tmp_path, f"{IR_SEMVER.major}.{IR_SEMVER.minor + 1}.0")
    with pytest.warns(records.NewerMinorVersionWarning):
        assert [r.key for r in records.read_records(newer)] == ["a"]
    with pytest.raises(RecordFileError, match=r"reads IR 1\.x only"):
        list(records.read_records(_file_with_version(tmp_path, "2.0.0")))


def test_an_older_minor_file_reads_with_defaults(tmp_path):
    path = _file_with_version(tmp_path, "1.0.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (record,) = records.read_records(path)
    assert not record.HasField("response") and record.provenance.attempt_count == 0


def test_a_record_written_today_reads_back_into_an_identical_response(tmp_path):
    model = Model(ReferenceModel(), name="reference")
    request = build_request("", prompt="Once upon", max_output_tokens=50, top_logprobs=5)
    request.input_scoring.continuations.add(text=" a time")
    import asyncio

    for fmt, name in (("jsonl", "out.jsonl"), ("binary", "out.binpb")):
        output = tmp_path / name
        asyncio.run(run_batch(model, [("only", request)], output, fmt=fmt, progress_stream=open(os.devnull, "w")))
        (record,) = records.read_records(output)
        expected = model.run(request)
        for r in (expected, record.response):
            r.ClearField("timing")
        assert isinstance(record.response, response_pb2.Response) and record.response == expected
        provenance = record.provenance
        assert provenance.ir_version == records.IR_VERSION and provenance.transport == "reference"
        assert provenance.provider_model == "modelir-reference-1" and provenance.attempt_count == 1
        assert provenance.end_time.ToNanoseconds() >= provenance.start_time.ToNanoseconds() > 0


def test_binary_is_at_most_half_the_size_of_jsonl_for_logprob_heavy_records(tmp_path):
    import asyncio

    model = Model(ReferenceModel(), name="reference")
    inputs = [
        (f"k{i}", build_request("", prompt=f"p{i}", max_output_tokens=500, top_logprobs=20, seed=i)) for i in range(20)
    ]
    sizes = {}
    for fmt, name in (("jsonl", "a.jsonl"), ("binary", "a.binpb")):
        asyncio.run(run_batch(model, inputs, tmp_path / name, fmt=fmt, progress_stream=open(os.devnull, "w")))
        sizes[fmt] = (tmp_path / name).stat().st_size
    ratio = sizes["binary"] / sizes["jsonl"]
    assert ratio <= 0.5, sizes
    converted = tmp_path / "c.binpb"
    assert (
        subprocess.run(
            [*MODELIR, "records", "convert", str(tmp_path / "a.jsonl"), str(converted), "--to", "binary"]
        ).returncode
        == 0
    )
    assert [r.key for r in records.read_records(converted)] == [f"k{i}" for i in range(20)]


def test_failed_requests_are_recorded_and_retried_on_resume(tmp_path):
    import asyncio

    model = Model(ReferenceModel(), name="reference")
    bad = build_request("", prompt="x")
    bad.fim.suffix = "y"  # the reference model cannot do FIM: a recorded failure
    output = tmp_path / "out.jsonl"
    first = asyncio.run(
        run_batch(
            model,
            [("good", build_request("", prompt="x")), ("bad", bad)],
            output,
            progress_stream=open(os.devnull, "w"),
        )
    )
    assert (first.ok, first.failed) == (1, 1)
    failed = [r for r in records.read_records(output) if r.status == record_pb2.RECORD_STATUS_FAILED]
    assert failed[0].failure.reason == 2 and "FIM" in failed[0].failure.message  # UNSUPPORTED_CAPABILITY
    again = asyncio.run(
        run_batch(
            model,
            [("good", build_request("", prompt="x")), ("bad", bad)],
            output,
            resume=True,
            retry_failed=False,
            progress_stream=open(os.devnull, "w"),
        )
    )
    assert (again.skipped, again.ok, again.failed) == (2, 0, 0)
    retried = asyncio.run(
        run_batch(
            model,
            [("good", build_request("", prompt="x")), ("bad", bad)],
            output,
            resume=True,
            progress_stream=open(os.devnull, "w"),
        )
    )
    assert (retried.skipped, retried.failed) == (1, 1)
    assert max(r.provenance.attempt_count for r in records.read_records(output) if r.key == "bad") == 2


def test_input_keys_are_given_or_the_input_position(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"prompt": "a"}\n\n{"key": "mine", "request": {"prompt": "b"}}\n{"request": {"prompt": "c"}}\n')
    keys = [key for key, _ in read_inputs(source)]
    assert keys == ["#0", "mine", "#2"]  # positions count requests (blank lines skipped), given keys are kept
    source.write_text('{"key": "x", "request": {"prompt": "a"}}\n{"key": "x", "request": {"prompt": "b"}}\n')
    with pytest.raises(ValueError, match="already used on line 1"):
        read_inputs(source)


def test_a_resumed_run_into_another_series_says_what_to_do_and_never_to_delete_the_records(tmp_path):
    from modelir.batch import run_batch
    from modelir.records import OtherSeriesError
    from modelir.version import IR_SEMVER

    path = _file_with_version(tmp_path, f"{IR_SEMVER.major + 1}.0.0")
    model = Model(ReferenceModel(), name="reference")
    import asyncio

    inputs = [("b", build_request("", prompt="x", max_output_tokens=2))]
    with pytest.raises(OtherSeriesError) as caught:
        asyncio.run(run_batch(model, inputs, path, resume=True, progress_stream=open(os.devnull, "w")))
    assert "new output file" in str(caught.value) and "delete" not in str(caught.value)
