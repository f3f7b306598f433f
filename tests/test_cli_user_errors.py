"""The command line as a user meets it (each through the real command, a subprocess): a mistake is one line on stderr,
never a traceback; Ctrl-C and a closed pipe end cleanly; and the options issue #15 asked for."""

from __future__ import annotations

import argparse
import io
import json
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from modelir import Model, ReferenceModel, build_request
from modelir.batch import run_batch
from modelir.cli import build_parser
from modelir.records import files as records
from modelir.version import IR_VERSION, SDK_VERSION

MODELIR = [sys.executable, "-m", "modelir.cli"]


def _modelir(*args: str, cwd=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*MODELIR, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _one_line_error(done: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """The run failed with `code`, said so in one `modelir:` line naming each needle, and printed no traceback."""
    err = done.stderr.strip()
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("modelir: "), err
    for needle in needles:
        assert needle in err, err
    return err


def _inputs(path, count: int, tokens: int = 4) -> None:
    path.write_text(
        "".join(json.dumps({"prompt": f"p{i}", "sampling": {"maxOutputTokens": tokens}}) + "\n" for i in range(count))
    )


def _record_file(path, count: int, tokens: int = 4) -> None:
    import asyncio

    model = Model(ReferenceModel(), name="reference")
    inputs = [(f"k{i}", build_request("", prompt=f"p{i}", max_output_tokens=tokens)) for i in range(count)]
    asyncio.run(run_batch(model, inputs, path, progress_stream=io.StringIO()))


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (["run", "--model", "reference", "--input", "nope.jsonl", "--output", "o.jsonl"], 2, ["--input nope.jsonl"]),
        (["run", "--model", "reference", "--input", "in.jsonl", "--output", "no/o.jsonl"], 2, ["'no' does not exist"]),
        (["validate", "--model", "reference", "--request", "nope.json"], 2, ["--request nope.json: no such file"]),
        (["validate", "--model", "reference", "--request", "bad.json"], 2, ["not a Request in proto-JSON"]),
        (["records", "inspect", "nope.jsonl"], 2, ["nope.jsonl: no such file"]),
        (["records", "show", "."], 2, ["is a directory"]),
        (["records", "convert", "nope.jsonl", "x.binpb", "--to", "binary"], 2, ["nope.jsonl: no such file"]),
        (["serve", "--config", "nope.yaml"], 2, ["nope.yaml: cannot read the file"]),
        (["generate", "--model", "gpt4", "hi"], 1, ["no model named 'gpt4'", "(known: reference)"]),
        (
            ["check", "--model", "reference", "--needs", "chat,wings"],
            2,
            ["unknown capability 'wings'", "input_scoring"],
        ),
        (["check", "--model", "reference", "--needs", "chat,fim,tools", "--top-logprobs", "50"], 1, ["FIM", "is 20"]),
    ],
)
def test_a_user_error_is_one_line_and_no_traceback(tmp_path, args, code, needles):
    _inputs(tmp_path / "in.jsonl", 1)
    (tmp_path / "bad.json").write_text('{"model": "reference", "prompt": 3.5, "colour": "red"}')
    _one_line_error(_modelir(*args, cwd=tmp_path), code, *needles)


def test_an_unknown_model_in_a_configuration_lists_the_known_ones(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  small: {transport: reference}\n  big: {transport: reference}\n")
    done = _modelir("generate", "--config", str(config), "--model", "medium", "hi")
    _one_line_error(done, 1, "UNKNOWN_MODEL", "'medium'", "(known: big, small)")


def test_version_and_help_for_every_option():
    done = _modelir("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"modelir {SDK_VERSION} (IR {IR_VERSION})"
    undocumented = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help:
                undocumented.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "modelir")
    assert undocumented == []
    assert "the sampling seed" in _modelir("generate", "--help").stdout


def test_a_closed_pipe_ends_quietly(tmp_path):
    _record_file(tmp_path / "r.jsonl", 2000, tokens=16)  # far more than a pipe's buffer
    process = subprocess.Popen(
        [*MODELIR, "records", "show", str(tmp_path / "r.jsonl")], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout.readline().startswith(b"k0  ok  ")
    process.stdout.close()  # what `| head -1` does once it has its line
    assert process.wait(30) == 141  # 128 + SIGPIPE, as the shell reports any command a closed pipe ended
    assert process.stderr.read() == b""


def test_ctrl_c_during_run_says_what_is_safe_and_how_to_resume(tmp_path):
    _inputs(tmp_path / "in.jsonl", 20_000, tokens=64)
    output = tmp_path / "out.jsonl"
    command = [*MODELIR, "run", "--model", "reference", "--input", "in.jsonl", "--output", "out.jsonl"]
    process = subprocess.Popen(
        [*command, "--concurrency", "2"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal delivers it: a test run started in the background of a non-interactive shell
        # inherits SIGINT ignored, and so would the command without this.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    # Some records past the header (which carries the IR's descriptor set, tens of kilobytes on its own).
    while time.monotonic() < deadline and (not output.exists() or output.read_bytes().count(b"\n") < 40):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    err = process.communicate(timeout=60)[1]
    assert process.returncode == 130 and "Traceback" not in err, err
    match = re.search(
        r"^modelir: interrupted: (\d+) of 20000 records are safe in out\.jsonl; to carry on: (.*)$", err, re.M
    )
    assert match, err
    safe = int(match.group(1))
    assert 0 < safe < 20_000 and safe == len({r.key for r in records.scan(output).records})
    assert (
        match.group(2) == "modelir run --model reference --input in.jsonl --output out.jsonl --concurrency 2 --resume"
    )


def test_resume_progress_counts_against_the_whole_input(tmp_path):
    import asyncio

    model = Model(ReferenceModel(), name="reference")
    inputs = [(f"k{i}", build_request("", prompt=f"p{i}", max_output_tokens=2)) for i in range(10)]
    asyncio.run(run_batch(model, inputs[:6], tmp_path / "o.jsonl", progress_stream=io.StringIO()))
    progress = io.StringIO()
    asyncio.run(run_batch(model, inputs, tmp_path / "o.jsonl", resume=True, progress_stream=progress))
    assert progress.getvalue().startswith("done 10/10 (6 before this run)  failed 0")


def test_a_newer_record_file_warns_in_one_line(tmp_path):
    _record_file(tmp_path / "r.jsonl", 2)
    newer = tmp_path / "newer.jsonl"
    major, minor, _ = IR_VERSION.split(".")
    newer_version = f"{major}.{int(minor) + 1}.0"
    newer.write_text(
        (tmp_path / "r.jsonl")
        .read_text()
        .replace(f'"irVersion": "{IR_VERSION}"', f'"irVersion": "{major}.{int(minor) + 1}.0"', 1)
    )
    done = _modelir("records", "inspect", str(newer))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"modelir: warning: {newer} was written with IR {newer_version}, newer than this SDK's {IR_VERSION}: "
        "fields this SDK does not know are not shown. Upgrade modelir to see them."
    ]


def test_format_and_extension_that_disagree_warn(tmp_path):
    _inputs(tmp_path / "in.jsonl", 1)
    done = _modelir(
        "run", "--model", "reference", "--input", "in.jsonl", "--output", "o.jsonl", "--format", "binary", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "modelir: warning: --format binary, but o.jsonl ends in .jsonl (a jsonl name); writing binary" in done.stderr
    assert records.format_of(tmp_path / "o.jsonl") == "binary"
    agreeing = _modelir(
        "run", "--model", "reference", "--input", "in.jsonl", "--output", "o.binpb", "--format", "binary", cwd=tmp_path
    )
    assert agreeing.returncode == 0 and "warning" not in agreeing.stderr


def test_generate_takes_system_temperature_seed_top_logprobs_and_json():
    common = ["generate", "--model", "reference", "--system", "Be brief.", "--temperature", "0.7", "--seed", "3"]
    common += ["--max-tokens", "6", "--top-logprobs", "4"]
    first, again = _modelir(*common, "--json", "Hello"), _modelir(*common, "--json", "Hello")
    assert first.returncode == 0, first.stderr
    response = json.loads(first.stdout)
    assert response["choices"] == json.loads(again.stdout)["choices"]  # the seed makes it repeatable
    logprobs = response["choices"][0]["logprobs"]
    assert logprobs["topCounts"] == [4] * 6 and len(logprobs["tokenIds"]) == 6
    other_seed = _modelir(*[a if a != "3" else "4" for a in common], "--json", "Hello")
    assert json.loads(other_seed.stdout)["choices"] != response["choices"]
    text = _modelir(*common, "Hello")
    lines = text.stdout.splitlines()
    assert lines[1].split() == ["token", "logprob", "top", "alternatives"] and len(lines) == 2 + 6
    # The system prompt reached the model: it is part of what the model read.
    plain = json.loads(_modelir(*common[:3], *common[5:], "--json", "--chat", "Hello").stdout)
    assert int(response["usage"]["inputTokenCount"]) > int(plain["usage"]["inputTokenCount"])


def test_models_prints_aligned_columns(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        textwrap.dedent(
            """
            models:
              a: {transport: reference}
              a-much-longer-name: {transport: reference, remove_capabilities: [TOOLS]}
            """
        )
    )
    lines = _modelir("models", "--config", str(config)).stdout.splitlines()
    assert lines[0].split() == ["model", "transport", "capabilities"]
    column = lines[0].index("capabilities")
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in lines)
    assert lines[0].index("transport") == lines[1].index("reference") == lines[2].index("reference")


def test_records_show_prints_each_answer(tmp_path):
    _record_file(tmp_path / "r.jsonl", 3)
    (record, *_) = records.read_records(tmp_path / "r.jsonl")
    from modelir import view

    done = _modelir("records", "show", str(tmp_path / "r.jsonl"), "--key", "k0")
    assert done.stdout == f"k0  ok  {json.dumps(view(record.response).text, ensure_ascii=False)}\n"
    _one_line_error(_modelir("records", "show", str(tmp_path / "r.jsonl"), "--key", "k9"), 2, "no record with key 'k9'")


def test_records_show_prints_a_failure_by_its_reason(tmp_path):
    import asyncio

    model = Model(ReferenceModel(), name="reference")
    fim = build_request("", prompt="x", max_output_tokens=2)
    fim.fim.suffix = "y"  # the reference model has no FIM: a failed record
    inputs = [("good", build_request("", prompt="x", max_output_tokens=2)), ("bad", fim)]
    asyncio.run(run_batch(model, inputs, tmp_path / "r.jsonl", progress_stream=io.StringIO()))
    done = _modelir("records", "show", str(tmp_path / "r.jsonl"), "--key", "bad")
    assert done.stdout.startswith("bad  failed  UNSUPPORTED_CAPABILITY: ") and "FIM" in done.stdout


def test_the_commands_in_process(tmp_path, capsys):
    """The same commands through `main()` (the subprocess tests above are what a user sees; these count coverage)."""
    from modelir.cli import main

    assert main(["models", "--json"]) == 0
    assert '"transport": "reference"' in capsys.readouterr().out
    assert main(["check", "--model", "reference", "--needs", "chat, tools", "--top-logprobs", "5"]) == 0
    assert capsys.readouterr().out == "reference has everything the task needs: chat, tools\n"
    assert main(["check", "--model", "reference", "--needs", " ,"]) == 2
    assert "give at least one capability" in capsys.readouterr().err
    argv = ["generate", "--model", "reference", "--stream", "--top-logprobs", "2", "--max-tokens", "3", "hi"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[1].startswith("token") and "[usage] input=" in out.err
    assert main(["generate", "--model", "reference", "--stream", "--json", "--max-tokens", "3", "hi"]) == 0
    assert int(json.loads(capsys.readouterr().out)["usage"]["outputTokenCount"]) == 3
    _inputs(tmp_path / "in.jsonl", 3)
    out_file = str(tmp_path / "o.jsonl")
    assert main(["run", "--model", "reference", "--input", str(tmp_path / "in.jsonl"), "--output", out_file]) == 0
    assert "3 ok, 0 failed, 0 already done, of 3" in capsys.readouterr().err
    assert main(["records", "inspect", out_file]) == 0
    assert "records: 3  ok: 3" in capsys.readouterr().out
    assert main(["records", "verify", out_file]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")
    assert main(["records", "show", out_file]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["records", "convert", out_file, str(tmp_path / "o.binpb"), "--to", "binary"]) == 0
    assert "wrote 3 records" in capsys.readouterr().out
    resumed = ["run", "--model", "reference", "--input", str(tmp_path / "in.jsonl"), "--output", out_file]
    assert main([*resumed, "--resume", "--format", "binary"]) == 0
    assert "--format binary is ignored: --resume appends" in capsys.readouterr().err
    request = tmp_path / "request.json"
    request.write_text('{"model": "reference", "prompt": "x", "fim": {"suffix": "y"}}')
    assert main(["validate", "--model", "reference", "--request", str(request)]) == 1
    assert "missing capabilities: FIM" in capsys.readouterr().out
    assert main(["conformance", "--transport", "ollama"]) == 0
    assert "ollama: " in capsys.readouterr().out
