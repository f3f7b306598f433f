"""The command line and the served process: config validation, `modelir serve`, SIGTERM draining."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap

import grpc
import pytest
from modelir import accumulate, build_request
from modelir.config import ConfigError, load_config
from modelir.remote import RemoteModel
from modelir.v1 import service_pb2, service_pb2_grpc

MODELIR = [sys.executable, "-m", "modelir.cli"]


def _write(tmp_path, text: str):
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models: {}\n", "models: give at least one model"),
        ("models:\n  a: {transport: nope}\n", "models.a.transport: unknown transport 'nope'"),
        ("models:\n  a: {transport: reference, colour: red}\n", "models.a.colour: unknown field"),
        (
            "models:\n  a: {transport: reference, remove_capabilities: [WINGS]}\n",
            "models.a.remove_capabilities: unknown capability 'WINGS'",
        ),
        ("models:\n  a: {transport: reference, limits: {max_concurrency: -1}}\n", "models.a.limits.max_concurrency"),
        ("models:\n  a: {transport: reference, limiter: shared}\n", "no limiter named 'shared'"),
        ("server: {auth_tokens_env: MODELIR_TEST_UNSET}\nmodels:\n  a: {transport: reference}\n", "is not set"),
        ("models:\n  a: {transport: reference, base_url: 'http://x'}\n", "runs in-process"),
        ("- just\n- a list\n", "top level"),
    ],
)
def test_config_errors_name_file_model_and_field(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value)


def test_config_narrows_and_shares_limiters(tmp_path):
    path = _write(
        tmp_path,
        """
        server: {auth_tokens_env: TOKENS}
        limiters:
          key: {max_concurrency: 3}
        models:
          small: {transport: reference, remove_capabilities: [TOOLS, input_scoring], limiter: key}
          other: {transport: reference, limiter: key, timeout_seconds: 5}
        """,
    )
    config = load_config(path, environ={"TOKENS": "a, b"})
    assert config.auth_tokens == {"a", "b"}
    small = config.models["small"]
    assert "TOOLS" not in str(small.capabilities) and "INPUT_SCORING" not in str(small.capabilities)
    assert small.limiter is config.models["other"].limiter
    assert config.models["other"].default_timeout == 5


def _start_server(*args: str, env=None) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [*MODELIR, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    for line in process.stderr:
        match = re.search(r"serving .* on (127\.0\.0\.1:\d+)", line)
        if match:
            return process, match.group(1)
    raise AssertionError("the server never said where it listens")


def test_cli_serve_models_generate_validate(tmp_path):
    process, target = _start_server()
    try:
        listed = subprocess.run([*MODELIR, "models", "--target", target], capture_output=True, text=True, check=True)
        assert "reference" in listed.stdout and "INPUT_SCORING" in listed.stdout
        generated = subprocess.run(
            [*MODELIR, "generate", "--target", target, "--model", "reference", "--max-tokens", "5", "--stream", "hi"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "[usage] input=3 output=5" in generated.stderr
        request = tmp_path / "request.json"
        request.write_text('{"model": "reference", "prompt": "x", "fim": {"suffix": "y"}}')
        validated = subprocess.run(
            [*MODELIR, "validate", "--target", target, "--model", "reference", "--request", str(request)],
            capture_output=True,
            text=True,
        )
        assert validated.returncode == 1 and "missing capabilities: FIM" in validated.stdout
        # The sync twins of RemoteModel, from a plain (loop-less) thread.
        remote = RemoteModel(target, "reference")
        assert remote.capabilities.transport == "reference"
        assert remote.generate("x", max_output_tokens=3).usage.output_token_count == 3
    finally:
        process.terminate()
        process.wait(10)


async def test_sigterm_drains_in_flight_calls():
    process, target = _start_server("--grace", "20")
    try:
        request = build_request("reference", prompt="x", max_output_tokens=20_000, top_logprobs=20, seed=0)
        async with grpc.aio.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)]) as channel:
            call = service_pb2_grpc.ModelServiceStub(channel).StreamGenerate(
                service_pb2.StreamGenerateRequest(request=request)
            )
            events = [(await call.read()).event]
            process.send_signal(signal.SIGTERM)  # the call is in flight: we have read only its first event
            while (message := await call.read()) is not grpc.aio.EOF:
                events.append(message.event)
            assert await call.code() == grpc.StatusCode.OK
        response = accumulate(events)
        assert len(response.choices[0].logprobs.token_logprobs) > 1000 and response.choices[0].finish_reason
        assert process.wait(15) == 0
        log = process.stderr.read()
        # Shutdown began while the call was in flight, and the call still finished OK.
        assert log.index("shutting down: draining in-flight calls") < log.index(
            "StreamGenerate model=reference transport=reference status=OK"
        )
    finally:
        if process.poll() is None:
            process.kill()
