"""Multi-turn token-in (`transports/token_prompt.py`, `calls/token_prompt.py`): a conversation whose assistant
turns carry their sampled ids runs as one token-id prompt, built against a fake llama-server whose template and
tokenizer are written here (ChatML, bytes plus one merge, so that re-tokenizing the turns' text would change ids)."""

from __future__ import annotations

import httpx
import orjson
import pytest
from modelir import Model, accumulate, errors
from modelir.http.executor import Executor
from modelir.pipeline.prepare import Pipeline
from modelir.transports import token_prompt
from modelir.transports.base import HttpResponse
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.transports.vllm import VLLM
from modelir.v1 import content_pb2, request_pb2

BOS, EOS, START, END = 352, 353, 354, 355
SPECIAL = {"<s>": BOS, "</s>": EOS, "<|im_start|>": START, "<|im_end|>": END}
AB = 300  # the one merge: "ab"


def tokenize(text: str, add_special: bool = False) -> list[int]:
    """Special tokens, then bytes, with "ab" merged: the tokenizer a naive text round trip goes through."""
    ids = [BOS] if add_special else []
    at = 0
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


def chatml(messages: list[dict], generation_prompt: bool, *, mark_latest: bool = False) -> str:
    out = ""
    for i, m in enumerate(messages):
        latest = "(latest) " if mark_latest and i == len(messages) - 1 and m["role"] == "user" else ""
        out += f"<|im_start|>{m['role']}\n{latest}{m['content']}<|im_end|>\n"
    return out + ("<|im_start|>assistant\n" if generation_prompt else "")


class FakeLlamaServer:
    """`/apply-template`, `/tokenize` and `/completion` (unary and streamed), keeping every body it was sent."""

    def __init__(self, *, mark_latest: bool = False, blank_assistant: bool = False) -> None:
        self.mark_latest = mark_latest
        self.blank_assistant = blank_assistant  # a template that writes no assistant content
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.calls.append((request.url.path, body))
        if request.url.path == "/apply-template":
            blank = {"role": "assistant", "content": ""}
            messages = [blank if self.blank_assistant and m["role"] == "assistant" else m for m in body["messages"]]
            prompt = chatml(messages, body.get("add_generation_prompt", True), mark_latest=self.mark_latest)
            return httpx.Response(200, json={"prompt": prompt})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": tokenize(body["content"], body["add_special"])})
        assert request.url.path == "/completion"
        done = {"content": "ok", "tokens": [111, 107, EOS], "stop": True, "stop_type": "eos"}
        done |= {"tokens_evaluated": len(body["prompt"]), "tokens_predicted": 3}
        if body.get("stream"):
            first = {"content": "ok", "tokens": [111, 107], "stop": False}
            last = done | {"content": "", "tokens": [EOS]}
            events = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in (first, last))
            return httpx.Response(200, content=events, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=done)

    def prompts(self) -> list[list[int]]:
        return [body["prompt"] for path, body in self.calls if path == "/completion"]


def message(role: int, text: str, token_ids: list[int] | None = None) -> content_pb2.Message:
    out = content_pb2.Message(role=role, token_ids=token_ids or [])
    out.parts.add().text = text
    return out


USER, ASSISTANT, TOOL, SYSTEM = (
    content_pb2.ROLE_USER,
    content_pb2.ROLE_ASSISTANT,
    content_pb2.ROLE_TOOL,
    content_pb2.ROLE_SYSTEM,
)
# Turn 1 was sampled as "a", "b" (two byte tokens; its text re-tokenizes as the one merge "ab"), ending with EOS;
# turn 2 ends with the template's own end-of-turn token.
TURN_1 = [97, 98, 40, 50, 41, EOS]
TURN_2 = [100, 111, 110, 101, END]
CONVERSATION = [
    message(SYSTEM, "Add."),
    message(USER, "2+3?"),
    message(ASSISTANT, "ab(2)", TURN_1),
    message(TOOL, "5"),
    message(ASSISTANT, "done", TURN_2),
    message(USER, "ok?"),
]


def request_of(messages: list[content_pb2.Message]) -> request_pb2.Request:
    out = request_pb2.Request(model="tiny")
    out.conversation.messages.extend(messages)
    out.sampling.max_output_tokens = 3
    return out


@pytest.fixture
async def llama():
    servers: list[Executor] = []

    def build(**options: bool) -> tuple[Model, FakeLlamaServer]:
        server = FakeLlamaServer(**options)
        executor = Executor("http://llama.test", transport=httpx.MockTransport(server))
        servers.append(executor)
        return Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor), server

    yield build
    for executor in servers:
        await executor.aclose()


async def test_the_prompt_keeps_every_turns_ids_and_renders_only_what_is_between(llama):
    model, server = llama()
    response = await model.arun(request_of(CONVERSATION))
    (prompt,) = server.prompts()
    first = tokenize(chatml([{"role": "system", "content": "Add."}, {"role": "user", "content": "2+3?"}], True), True)
    tool = tokenize("<|im_end|>\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    user = tokenize("\n<|im_start|>user\nok?<|im_end|>\n<|im_start|>assistant\n")  # END was sampled: not twice
    assert prompt == first + TURN_1 + tool + TURN_2 + user
    assert list(response.prompt_token_ids) == prompt  # the ids the engine was given, as the response's prompt
    assert list(response.choices[0].sampled_tokens.token_ids) == [111, 107, EOS]
    # The naive text round trip re-tokenizes turn 1's "ab" as the merge: a different id where the model sampled two.
    names = {SYSTEM: "system", USER: "user", ASSISTANT: "assistant", TOOL: "tool"}
    naive = tokenize(chatml([{"role": names[m.role], "content": m.parts[0].text} for m in CONVERSATION], True), True)
    assert naive != prompt and AB in naive and AB not in prompt


async def test_each_turns_prompt_extends_the_previous_one_by_its_sampled_ids(llama):
    model, server = llama()
    await model.arun(request_of(CONVERSATION[:4]))
    await model.arun(request_of(CONVERSATION))
    shorter, longer = server.prompts()
    assert longer[: len(shorter)] == shorter
    assert longer[len(shorter) : len(shorter) + len(TURN_2)] == TURN_2


async def test_renders_are_asked_with_the_turns_standing_in_and_the_generation_prompt(llama):
    model, server = llama()
    await model.arun(request_of(CONVERSATION))
    renders = [body for path, body in server.calls if path == "/apply-template"]
    assert len(renders) == 3  # before turn 1, before turn 2, the whole
    assert all(body["add_generation_prompt"] for body in renders)
    whole = renders[-1]["messages"]
    assert whole[2] == {"role": "assistant", "content": token_prompt.sentinel(2)}
    assert whole[4] == {"role": "assistant", "content": token_prompt.sentinel(4)}
    assert [m["role"] for m in renders[0]["messages"]] == ["system", "user"]


async def test_a_template_that_rewrites_an_earlier_turn_is_refused_naming_the_turn(llama):
    model, server = llama(mark_latest=True)
    with pytest.raises(errors.InvalidRequestError) as caught:
        await model.arun(request_of(CONVERSATION))
    assert [v.field for v in caught.value.violations] == ["conversation.messages[2].token_ids"]
    assert "not a prefix of the whole conversation's render" in caught.value.message
    assert "not prefix-preserving" in caught.value.message
    assert server.prompts() == []  # nothing generated: never a silent re-render


async def test_a_template_that_does_not_write_the_turn_is_refused(llama):
    model, _ = llama(blank_assistant=True)
    with pytest.raises(errors.InvalidRequestError) as caught:
        await model.arun(request_of(CONVERSATION))
    assert caught.value.violations[0].field == "conversation.messages[2].token_ids"
    assert "does not write this turn right after its generation prompt" in caught.value.message


async def test_a_streamed_token_in_call_builds_the_same_prompt(llama):
    model, server = llama()
    events = [e async for e in model.astream(request_of(CONVERSATION))]
    unary = await model.arun(request_of(CONVERSATION))
    streamed, again = server.prompts()
    assert streamed == again == list(unary.prompt_token_ids)
    assert [b.get("stream") for p, b in server.calls if p == "/completion"] == [True, None]
    assert "".join(p.text for p in accumulate(events).choices[0].message.parts) == "ok"
    # llama.cpp's /completion stream reports no prompt ids: the end carries the ids sent, as the unary answer does
    assert list(accumulate(events).prompt_token_ids) == list(unary.prompt_token_ids) == streamed


def test_the_assembly_alone_with_a_close_that_was_not_sampled():
    """A turn cut by its length limit has no end-of-turn token: the template's close is added in full."""
    request = request_of([message(USER, "hi"), message(ASSISTANT, "x", [120]), message(USER, "go")])
    plan = token_prompt.plan(request)
    rendered = [[BOS, START, 1, END, START, 2], [BOS, START, 1, END, START, 2, 7, 7, END, START, 3, END, START, 2]]
    expected = [BOS, START, 1, END, START, 2, 120, END, START, 3, END, START, 2]
    assert token_prompt.assemble(request, plan, rendered, [[7, 7]]) == expected


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([message(USER, "hi", [1]), message(USER, "go")], "assistant messages only"),
        ([message(USER, "hi"), message(ASSISTANT, "x", [1])], "ends with what the model answers"),
    ],
)
def test_shapes_a_token_prompt_cannot_carry_are_refused_before_any_call(messages, reason):
    with pytest.raises(errors.UnsupportedCapabilityError) as caught:
        Pipeline(LlamaCpp()).check(request_of(messages))
    assert any(reason in r for r in caught.value.unsupported.reasons)


def test_the_engines_claim_it_and_ollama_still_refuses_it_up_front():
    request = request_of(CONVERSATION)
    for transport in (LlamaCpp(), VLLM()):
        assert Pipeline(transport).prepare(request).native is None  # lowered once its prompt is built
    with pytest.raises(errors.UnsupportedCapabilityError) as caught:
        Pipeline(Ollama()).check(request)
    assert "MULTI_TURN_TOKEN_INPUT" in caught.value.message


def test_vllm_renders_each_prefix_through_tokenize_with_messages():
    plan = token_prompt.plan(request_of(CONVERSATION))
    steps = VLLM(provider_model="tiny").token_prompt_steps(plan)
    natives = next(steps)
    bodies = [orjson.loads(n.body) for n in natives]
    assert [n.path for n in natives] == ["/tokenize"] * 5  # three renders, two sentinels, in one round
    assert all(b["add_generation_prompt"] and not b["add_special_tokens"] for b in bodies[:3])
    assert bodies[3] == {"model": "tiny", "prompt": token_prompt.sentinel(2), "add_special_tokens": False}
    answers = [httpx.Response(200, json={"tokens": [i]}) for i in range(5)]
    with pytest.raises(StopIteration) as done:
        steps.send([_as_http(a) for a in answers])
    assert done.value.value == ([[0], [1], [2]], [[3], [4]])


def _as_http(answer: httpx.Response) -> HttpResponse:
    return HttpResponse(answer.status_code, dict(answer.headers), answer.content)
