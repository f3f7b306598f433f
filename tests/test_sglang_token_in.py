"""sglang conversations and multi-turn token-in (`transports/sglang_chat.py`): with the model's chat template
configured, every conversation is rendered locally, tokenized by a fake sglang's `/tokenize` (its documented shape:
`prompt` a list, one id list per prompt) and sent to `/generate` as `input_ids`; without one, conversations are
refused up front. The fake's tokenizer merges "ab", so that re-tokenizing a turn's text would change its ids."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest
from modelir import Model, accumulate, errors
from modelir.config import ConfigError, build_config
from modelir.conformance import runner
from modelir.http.executor import Executor
from modelir.registry import build_transport
from modelir.transports import token_prompt
from modelir.transports.sglang import SGLang
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2

C = capabilities_pb2
START, END = 151644, 151645
SPECIAL = {"<|im_start|>": START, "<|im_end|>": END}
AB = 300  # the one merge
CHATML = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)


def tokenize(text: str) -> list[int]:
    ids, at = [], 0
    while at < len(text):
        special = next((s for s in SPECIAL if text.startswith(s, at)), None)
        if special:
            ids.append(SPECIAL[special])
            at += len(special)
        elif text.startswith("ab", at):
            ids.append(AB)
            at += 2
        else:
            ids.extend(text[at].encode())
            at += 1
    return ids


def chatml(messages: list[tuple[str, str]]) -> str:
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in messages) + "<|im_start|>assistant\n"


class FakeSGLang:
    """`/tokenize` and `/generate` (unary and streamed), keeping every body it was sent."""

    def __init__(self, *, tokens: object = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.tokens = tokens  # an answer to send instead of the tokenization

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.calls.append((request.url.path, body))
        if request.url.path == "/tokenize":
            assert body["add_special_tokens"] is False and isinstance(body["prompt"], list)
            tokens = [tokenize(p) for p in body["prompt"]] if self.tokens is None else self.tokens
            return httpx.Response(200, json={"tokens": tokens, "count": [len(t) for t in tokens], "max_model_len": 99})
        assert request.url.path == "/generate"
        meta = {"id": "r", "finish_reason": {"type": "stop", "matched": END}, "completion_tokens": 3}
        meta["prompt_tokens"] = len(body["input_ids"])
        if body.get("stream"):
            events = [
                {"text": "ok", "output_ids": [111, 107], "meta_info": meta | {"finish_reason": None}},
                {"text": "", "output_ids": [END], "meta_info": meta},
            ]
            data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
            return httpx.Response(200, content=data, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={"text": "ok", "output_ids": [111, 107, END], "meta_info": meta})

    def prompts(self) -> list[list[int]]:
        return [body["input_ids"] for path, body in self.calls if path == "/generate"]


@pytest.fixture
async def sglang():
    executors: list[Executor] = []

    def build(template: str | None = CHATML, **options: object) -> tuple[Model, FakeSGLang]:
        server = FakeSGLang(**options)
        executor = Executor("http://sglang.test", transport=httpx.MockTransport(server))
        executors.append(executor)
        transport = SGLang(provider_model="q", chat_template=template)
        return Model(transport, name="q", executor=executor), server

    yield build
    for executor in executors:
        await executor.aclose()


def message(role: int, text: str, token_ids: list[int] | None = None) -> content_pb2.Message:
    out = content_pb2.Message(role=role, token_ids=token_ids or [])
    out.parts.add().text = text
    return out


SYSTEM, USER, ASSISTANT = content_pb2.ROLE_SYSTEM, content_pb2.ROLE_USER, content_pb2.ROLE_ASSISTANT
TURN_1 = [97, 98, 40, 50, 41, END]  # sampled as "a", "b" apart: its text re-tokenizes as the merge
TURN_2 = [100, 111, 110, 101, END]
CONVERSATION = [
    message(SYSTEM, "Add."),
    message(USER, "2+3?"),
    message(ASSISTANT, "ab(2)", TURN_1),
    message(USER, "more"),
    message(ASSISTANT, "done", TURN_2),
    message(USER, "ok?"),
]


def request_of(messages: list[content_pb2.Message]) -> request_pb2.Request:
    out = request_pb2.Request(model="q")
    out.conversation.messages.extend(messages)
    out.sampling.max_output_tokens = 3
    return out


async def test_a_first_turn_is_its_render_tokenized_by_the_engine(sglang):
    model, server = sglang()
    response = await model.arun(request_of(CONVERSATION[:2]))
    (path, body), (generate, _) = server.calls
    assert (path, generate) == ("/tokenize", "/generate")
    assert body["prompt"] == [chatml([("system", "Add."), ("user", "2+3?")])]
    assert server.prompts() == [tokenize(body["prompt"][0])]
    assert list(response.prompt_token_ids) == server.prompts()[0]
    assert list(response.choices[0].sampled_tokens.token_ids) == [111, 107, END]


async def test_token_turns_keep_their_ids_and_only_the_new_messages_are_rendered(sglang):
    model, server = sglang()
    await model.arun(request_of(CONVERSATION))
    (tokenized,) = [body for path, body in server.calls if path == "/tokenize"]  # one call for every render
    assert tokenized["prompt"][-2:] == [token_prompt.sentinel(2), token_prompt.sentinel(4)]
    (prompt,) = server.prompts()
    first = tokenize(chatml([("system", "Add."), ("user", "2+3?")]))
    between = tokenize("\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")  # END sampled: not twice
    after = tokenize("\n<|im_start|>user\nok?<|im_end|>\n<|im_start|>assistant\n")
    assert prompt == first + TURN_1 + between + TURN_2 + after
    naive = tokenize(chatml([("system", "Add."), ("user", "2+3?"), ("assistant", "ab(2)"), ("user", "more")]))
    assert AB in naive and AB not in prompt  # the text round trip would have changed the turn's ids


async def test_each_turns_prompt_extends_the_previous_one_by_its_sampled_ids(sglang):
    model, server = sglang()
    await model.arun(request_of(CONVERSATION[:2]))
    await model.arun(request_of(CONVERSATION[:4]))
    await model.arun(request_of(CONVERSATION))
    first, second, third = server.prompts()
    assert second[: len(first)] == first and second[len(first) : len(first) + len(TURN_1)] == TURN_1
    assert third[: len(second)] == second and third[len(second) : len(second) + len(TURN_2)] == TURN_2


async def test_a_streamed_conversation_builds_the_same_prompt(sglang):
    model, server = sglang()
    events = [e async for e in model.astream(request_of(CONVERSATION))]
    await model.arun(request_of(CONVERSATION))
    streamed, unary = server.prompts()
    assert streamed == unary
    assert "".join(p.text for p in accumulate(events).choices[0].message.parts) == "ok"
    assert list(accumulate(events).prompt_token_ids) == streamed


async def test_a_template_that_is_not_prefix_preserving_is_refused_naming_the_turn(sglang):
    marks_latest = CHATML.replace("message['content']", "('(latest) ' if loop.last else '') + message['content']")
    model, server = sglang(marks_latest)
    with pytest.raises(errors.InvalidRequestError) as caught:
        await model.arun(request_of(CONVERSATION))
    assert [v.field for v in caught.value.violations] == ["conversation.messages[2].token_ids"]
    assert "not prefix-preserving" in caught.value.message
    assert server.prompts() == []  # nothing generated


async def test_a_template_that_raises_is_an_invalid_request_before_any_call(sglang):
    model, server = sglang("{{ raise_exception('Only user and assistant roles are supported!') }}")
    with pytest.raises(errors.InvalidRequestError, match="Only user and assistant roles"):
        await model.arun(request_of(CONVERSATION[:2]))
    assert server.calls == []


@pytest.mark.parametrize("tokens", [[[1, 2]], "x", [[1, "2"], [3]], None])
async def test_a_tokenize_answer_of_the_wrong_shape_is_malformed(sglang, tokens):
    model, _ = sglang(tokens=tokens if tokens is not None else [])
    with pytest.raises(errors.MalformedResponseError):
        await model.arun(request_of(CONVERSATION))


async def test_without_a_template_a_conversation_is_refused_before_any_call(sglang):
    model, server = sglang(None)
    with pytest.raises(errors.UnsupportedCapabilityError) as caught:
        await model.arun(request_of(CONVERSATION))
    assert {C.CAPABILITY_CHAT, C.CAPABILITY_MULTI_TURN_TOKEN_INPUT} <= set(caught.value.unsupported.missing)
    assert any("`tokenizer_config`" in r for r in caught.value.unsupported.reasons)
    assert server.calls == []


def test_the_manifest_claims_chat_and_token_in_only_with_a_template():
    added = {C.CAPABILITY_CHAT, C.CAPABILITY_SYSTEM_MESSAGES, C.CAPABILITY_MULTI_TURN_TOKEN_INPUT}
    assert not added & set(SGLang().manifest().capabilities)
    claimed = set(SGLang(chat_template=CHATML).manifest().capabilities)
    assert added <= claimed and set(SGLang().manifest().capabilities) <= claimed
    assert C.CAPABILITY_TOOLS not in claimed  # tool calls are not parsed out of /generate's text
    assert SGLang(chat_template=CHATML).runs_as_token_prompt(request_of(CONVERSATION[:2]))


def test_tokenizer_config_is_read_from_the_configuration_files_directory(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    entry = {
        "transport": "sglang",
        "base_url": "http://sglang.test",
        "tokenizer_config": "models/tokenizer_config.json",
    }
    config = build_config({"models": {"q": entry}}, source=str(tmp_path / "modelir.yaml"), environ={})
    assert C.CAPABILITY_MULTI_TURN_TOKEN_INPUT in config.models["q"].capabilities.capabilities
    with pytest.raises(ConfigError, match=r"models\.q\.tokenizer_config: cannot read"):
        build_config({"models": {"q": entry}}, source=str(tmp_path / "elsewhere" / "m.yaml"), environ={})
    absolute = dict(entry, tokenizer_config=str(tmp_path / "models" / "tokenizer_config.json"))
    assert build_config({"models": {"q": absolute}}, source="/nowhere/m.yaml", environ={}).models["q"]


def test_a_broken_template_is_a_configuration_error_naming_the_option():
    with pytest.raises(ConfigError, match=r"models\.q\.chat_template: the chat template does not compile"):
        build_config(
            {"models": {"q": {"transport": "sglang", "base_url": "http://x", "chat_template": "{% if %}"}}},
            source="m.yaml",
            environ={},
        )
    assert isinstance(build_transport("sglang", {"chat_template": CHATML}), SGLang)


def _fixture(path, options: dict, proves: list[str]) -> None:
    path.write_text(json.dumps({"transport_options": options, "proves": proves}))


def test_coverage_counts_what_a_fixture_proves_with_its_own_options(tmp_path):
    _fixture(tmp_path / "with_template.json", {"chat_template": CHATML}, ["CHAT", "MULTI_TURN_TOKEN_INPUT"])
    _fixture(tmp_path / "without.json", {"provider_model": "q"}, ["SYSTEM_MESSAGES"])
    problems = runner.coverage_problems("sglang", sorted(tmp_path.glob("*.json")))
    assert "without proves SYSTEM_MESSAGES, which the manifest (with its options) does not claim" in problems
    assert not any("MULTI_TURN_TOKEN_INPUT" in p and "does not claim" in p for p in problems)
    assert not any("CHAT has no positive fixture" in p for p in problems)
    # claimed with the template and never proved: SYSTEM_MESSAGES by a fixture whose options claim it
    assert "claimed capability SYSTEM_MESSAGES has no positive fixture" in problems
