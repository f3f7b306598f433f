"""`connect()`, declared needs, typed raw responses and records from the SDK."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import anthropic.types
import google.genai.types
import modelir
import openai.types.chat
import pytest
from modelir import build_request, connect, needs, raw_json, raw_typed, recorded, view
from modelir.pipeline.needs import needs_of
from modelir.records.files import RecordWriter, read_records
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.v1 import capabilities_pb2, errors_pb2, record_pb2, response_pb2

from tests.fake_openai import FakeOpenAI

C = capabilities_pb2
FIXTURES = Path(__file__).resolve().parent.parent / "conformance" / "fixtures"


@pytest.fixture
def no_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# ---- connect -------------------------------------------------------------------------------------------


async def test_connect_to_a_provider_in_one_line(no_openai_env):
    async with FakeOpenAI() as fake:
        async with connect("openai_chat", "gpt-4o-mini", base_url=fake.base_url, api_key="sk-test") as model:
            assert view(await model.achat([("user", "hi")])).text == "Hello world!"
            events = [e async for e in model.astream(build_request(model.name, messages=[("user", "hi")]))]
    headers, body = fake.requests[0]
    assert headers["Authorization"] == "Bearer sk-test" and body["model"] == "gpt-4o-mini"
    assert model.name == "gpt-4o-mini" and events[-1].WhichOneof("event") == "end"
    assert "sk-test" not in repr(model)


async def test_connect_reads_the_environment_the_providers_sdk_reads(monkeypatch):
    async with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("MY_KEY", "sk-env")
        async with connect("openai_chat", "gpt-x", api_key_env="MY_KEY", max_concurrency=2, name="mini") as model:
            await model.achat([("user", "hi")])
            assert model.limiter.max_concurrency == 2 and model.name == "mini"
    assert fake.requests[0][0]["Authorization"] == "Bearer sk-env"


def test_connect_names_what_is_wrong(no_openai_env):
    cases = [
        (("opeani_chat", "m"), {}, "transport: expected one of anthropic_messages, google_genai"),
        (("openai_chat", "m"), {}, "api_key: expected a key: the environment variable OPENAI_API_KEY is not set"),
        (("openai_chat", "m"), {"api_key_env": "NOPE_KEY"}, "the environment variable NOPE_KEY is not set"),
        (("vllm", "m"), {}, "base_url: expected the http(s) URL of the vllm server"),
        (("openai_chat", "m"), {"api_key": "k", "base_url": "api.openai.com"}, "base_url: expected the http"),
        (("reference",), {"base_url": "http://x"}, "transport 'reference' runs in-process"),
        (("reference",), {"max_concurrency": 0}, "max_concurrency: expected a positive number"),
        (("reference",), {"timeout": -1}, "timeout: expected a positive number of seconds"),
        (("reference",), {"limiter": modelir.Limiter(), "max_concurrency": 3}, "limiter: expected either"),
        (("sglang", "q"), {"options": {"chat_templat": "x"}}, "options.chat_templat: expected an option"),
        (("ollama", "m"), {"options": {"vision": "yes"}}, "options.vision: expected an option transport 'ollama'"),
        (("sglang", "q"), {"options": {"provider_model": "q"}}, "options.provider_model: expected nothing"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(modelir.ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
            connect(*args, **kwargs)


def test_connect_takes_the_transports_own_options():
    """What a configuration file's model entry sets, connect sets too: sglang's chat template makes it take
    conversations (CHAT, MULTI_TURN_TOKEN_INPUT), Ollama's `vision: false` drops image input."""
    chat = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    claims = {
        (name, options_given): set(
            connect(name, "m", base_url="http://127.0.0.1:1", options=options).capabilities.capabilities
        )
        for name, options_given, options in [
            ("sglang", False, None),
            ("sglang", True, {"chat_template": chat}),
            ("ollama", False, None),
            ("ollama", True, {"vision": False}),
        ]
    }
    token_turns = {capabilities_pb2.CAPABILITY_CHAT, capabilities_pb2.CAPABILITY_MULTI_TURN_TOKEN_INPUT}
    assert not token_turns & claims["sglang", False] and token_turns <= claims["sglang", True]
    image = capabilities_pb2.CAPABILITY_IMAGE_INPUT
    assert image in claims["ollama", False] and image not in claims["ollama", True]


def test_the_reference_model_connects_sync_and_async():
    with connect("reference") as model:
        assert view(model.generate("Hi", max_output_tokens=5)).finish_reason == "length"

    async def main():
        async with connect("reference", "my-ref") as model:
            return await model.agenerate("Hi", max_output_tokens=5)

    assert asyncio.run(main()).model == "my-ref"


PROGRAM = """
import asyncio, sys, modelir
url = sys.argv[1]
def fresh():
    return modelir.connect("openai_chat", "gpt-x", base_url=url, api_key="k")
with fresh() as model:  # sync, closed by `with`
    assert modelir.view(model.chat([("user", "hi")])).text == "Hello world!"
async def main(model):
    await model.achat([("user", "hi")])
    async for _ in model.astream(modelir.build_request(model.name, messages=[("user", "hi")])):
        pass
async def closed():
    async with fresh() as model:
        await main(model)
        await model.aclose()  # closed, then used again on the same loop
        await main(model)
asyncio.run(closed())
forgotten = fresh()  # never closed: used on two asyncio.run loops and from sync code
asyncio.run(main(forgotten))
asyncio.run(main(forgotten))
forgotten.chat([("user", "hi")])
print("done")
"""


async def test_a_program_ends_without_session_warnings(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    async with FakeOpenAI() as fake:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-W", "error", str(script), fake.base_url, stdout=-1, stderr=-1
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert out.decode() == "done\n"
    assert err.decode() == ""  # no "Unclosed client session", no ResourceWarning (an error under -W error)
    assert len(fake.requests) == 10


# ---- needs ---------------------------------------------------------------------------------------------


def test_needs_name_every_gap_before_any_request(reference):
    task = needs("chat", "input_scoring", "fim", "constraint_regex", top_logprobs=50, choices=4)
    assert task.names == ["chat", "constraint_regex", "fim", "input_scoring"]
    with pytest.raises(modelir.UnsupportedCapabilityError) as caught:
        task.check(reference)
    assert set(caught.value.missing) == {C.CAPABILITY_FIM, C.CAPABILITY_CONSTRAINT_REGEX}
    assert [(v.limit, v.allowed, v.requested) for v in caught.value.unsupported.limit_violations] == [
        ("max_top_logprobs", 20, 50)
    ]
    assert str(caught.value) == (
        "model 'reference' lacks what the task needs: missing capabilities: FIM, CONSTRAINT_REGEX; "
        "max_top_logprobs is 20, the task needs 50"
    )
    needs("chat", "tools", "sampled_token_ids", top_logprobs=20).check(reference)
    with pytest.raises(modelir.ArgumentError, match=r"capabilities\[1\]: expected one of 'completion', 'chat'"):
        needs("chat", "scoring")


def test_needs_combine_and_come_from_a_sample_request(reference):
    combined = needs("chat", top_logprobs=5) | needs("tools", top_logprobs=10)
    assert combined.names == ["chat", "tools"] and combined.limits == {"max_top_logprobs": 10}
    sample = build_request("", prompt="x", top_logprobs=3, stop=["\n"])
    derived = needs_of(sample)
    assert {C.CAPABILITY_COMPLETION, C.CAPABILITY_TOP_K_LOGPROBS, C.CAPABILITY_STOP_SEQUENCES} <= derived.capabilities
    derived.check(reference)


async def test_needs_check_a_remote_model_the_same_way(reference):
    server, port = await build_server({"reference": reference}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "reference")
    try:
        with pytest.raises(modelir.UnsupportedCapabilityError) as caught:
            await needs("fim", "chat").acheck(remote)
        assert list(caught.value.missing) == [C.CAPABILITY_FIM]
        await needs("chat", "tokenize").acheck(remote)
    finally:
        await remote.aclose()
        await server.stop(None)


# ---- typed raw -----------------------------------------------------------------------------------------


async def test_a_kept_raw_exchange_reads_as_the_openai_sdk_type():
    async with FakeOpenAI() as fake:
        async with connect("openai_chat", "gpt-4o-mini", base_url=fake.base_url, api_key="k") as model:
            unary = await model.achat([("user", "hi")], include_raw=True)
            request = build_request(model.name, messages=[("user", "hi")], include_raw=True)
            streamed = [e async for e in model.astream(request)]
    completion = raw_typed(unary)
    assert isinstance(completion, openai.types.chat.ChatCompletion)
    assert completion.choices[0].message.content == "Hello world!" == view(unary).text
    assert raw_json(unary)["usage"]["prompt_tokens"] == 7
    chunks = raw_typed(streamed[-1])
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello world!"
    assert raw_json(streamed[-1])[-1]["usage"]["completion_tokens"] == 4  # `[DONE]` is not an event


def _fixture_raw(transport: str, name: str) -> response_pb2.RawExchange:
    fixture = json.loads((FIXTURES / transport / name).read_text())
    raw = response_pb2.RawExchange(transport=transport, http_status=200)
    if "stream_events" in fixture:
        for event in fixture["stream_events"]:
            raw.stream_events.add(event=event.get("event", ""), data=event["data"].encode())
    else:
        raw.body = json.dumps(fixture["http_response"]["body"]).encode()
    return raw


def test_anthropic_and_gemini_raw_exchanges_read_as_their_sdk_types():
    message = raw_typed(_fixture_raw("anthropic_messages", "thinking_tool_use.json"))
    assert isinstance(message, anthropic.types.Message)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    events = raw_typed(_fixture_raw("anthropic_messages", "stream_thinking_text_tool.json"))
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert "ping" not in [e.type for e in events]
    gemini = raw_typed(_fixture_raw("google_genai", "function_call_round_trip.json"))
    assert isinstance(gemini, google.genai.types.GenerateContentResponse)
    assert gemini.function_calls


def test_engines_answering_in_openais_shapes_read_as_openai_types():
    chat = raw_typed(_fixture_raw("llamacpp", "chat_logprobs_with_ids.json"))
    assert isinstance(chat, openai.types.chat.ChatCompletion) and chat.choices[0].logprobs.content
    with pytest.raises(LookupError, match="'llamacpp' answer"):  # the native /completion shape has no SDK type
        raw_typed(_fixture_raw("llamacpp", "completion_sampling.json"))


def test_raw_errors_say_what_to_do(reference):
    with pytest.raises(ValueError, match="include_raw=True"):
        raw_json(reference.generate("x", max_output_tokens=2))
    with pytest.raises(LookupError, match=r"no provider SDK type for this .sglang. answer.*raw_json"):
        raw_typed(response_pb2.RawExchange(transport="sglang", body=b"{}"))
    assert raw_json(response_pb2.RawExchange(transport="sglang", body=b'{"text": "a"}')) == {"text": "a"}
    with pytest.raises(ValueError, match="does not fit openai's ChatCompletion type"):
        raw_typed(response_pb2.RawExchange(transport="openai_chat", body=b'{"choices": 3}'))


# ---- records -------------------------------------------------------------------------------------------


def test_records_from_the_sdk_carry_full_provenance(reference, tmp_path):
    request = build_request("", prompt="Once", max_output_tokens=8)
    record = recorded(reference, request)
    p = record.provenance
    assert record.status == record_pb2.RECORD_STATUS_OK and record.request.model == "reference"
    assert record.key == ""  # no key given: the writer gives it its position in the file
    assert (p.ir_version, p.sdk_version) == (modelir.IR_VERSION, modelir.SDK_VERSION)
    assert (p.transport, p.transport_version, p.configured_model) == ("reference", "1.0.0", "reference")
    assert p.provider_model == "modelir-reference-1" and p.attempt_count == 1
    assert p.start_time.ToNanoseconds() <= p.end_time.ToNanoseconds()

    failed = recorded(reference, build_request("", prompt="x", regex="a+"))
    assert failed.status == record_pb2.RECORD_STATUS_FAILED
    assert failed.failure.reason == errors_pb2.ERROR_REASON_UNSUPPORTED_CAPABILITY
    assert failed.provenance.start_time.seconds and failed.provenance.transport == "reference"

    with RecordWriter.create(tmp_path / "out.jsonl") as writer:
        writer.append(record)
        writer.append(modelir.record_of(reference, request, reference.run(request), key="mine"))
    back = list(read_records(tmp_path / "out.jsonl"))
    assert back[0].request == record.request and back[0].key == "#0" and back[1].key == "mine"
    with pytest.raises(ValueError, match="exactly one of"):
        modelir.record_of(reference, request)
