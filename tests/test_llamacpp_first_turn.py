"""A rollout's first turn on llama-server (`LlamaCpp.runs_as_token_prompt`): a conversation that asks for token ids
runs the token-prompt path with no token turns (`/apply-template`, `/tokenize`, `/completion` with the ids), so its
answer has the prompt's ids and the sampled ids like every later turn's; one that a token prompt cannot carry (it
ends with an assistant turn) stays on the chat route with a `prompt_token_ids_unavailable` warning. Against the fake
llama-server of `test_token_prompt.py` (its ChatML template and byte tokenizer with one merge), answering the chat
route too."""

from __future__ import annotations

import httpx
import orjson
import pytest
from modelir import Model, accumulate, trajectory
from modelir.http.executor import Executor
from modelir.pipeline.prepare import Pipeline
from modelir.transports import token_prompt
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.vllm import VLLM
from modelir.v1 import request_pb2

from tests.test_token_prompt import ASSISTANT, EOS, SYSTEM, TOOL, USER, FakeLlamaServer, chatml, message, tokenize

FIRST = [message(SYSTEM, "Add."), message(USER, "2+3?")]
NAMES = {SYSTEM: "system", USER: "user", ASSISTANT: "assistant", TOOL: "tool"}


class FakeServer(FakeLlamaServer):
    """The fake llama-server, with logprobs on `/completion` when asked (`n_probs`) and a chat route that, like the
    real one, reports the sampled ids only in its logprobs and the prompt's never."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            body = orjson.loads(request.content)
            self.calls.append((request.url.path, body))
            content = [{"id": 111, "token": "o", "bytes": [111], "logprob": -0.5, "top_logprobs": []}]
            choice = {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "o"}}
            if body.get("logprobs"):
                choice["logprobs"] = {"content": content}
            answer = {"choices": [choice], "usage": {"prompt_tokens": 20, "completion_tokens": 1}}
            if body.get("stream"):
                chunk = {"choices": [{"index": 0, "delta": {"content": "o"}, **({"logprobs": choice.get("logprobs")})}]}
                end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": answer["usage"]}
                lines = [b"data: " + orjson.dumps(e) + b"\n\n" for e in (chunk, end)] + [b"data: [DONE]\n\n"]
                return httpx.Response(200, content=b"".join(lines), headers={"content-type": "text/event-stream"})
            return httpx.Response(200, json=answer)
        answer = super().__call__(request)
        body = self.calls[-1][1]
        if request.url.path != "/completion" or not body.get("n_probs"):
            return answer
        if body.get("stream"):  # as llama-server streams: one id (and its entry) per event, then the final one
            events: list[dict] = [
                {"content": chr(t) if t < 128 else "", "tokens": [t], "stop": False, "tokens_predicted": n + 1}
                | {"completion_probabilities": [_entry(t)]}
                for n, t in enumerate((111, 107, EOS))
            ]
            events.append({"content": "", "tokens": [], "stop": True, "stop_type": "eos", "tokens_predicted": 3})
            events[-1]["tokens_evaluated"] = len(body["prompt"])
            data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
            return httpx.Response(200, content=data, headers={"content-type": "text/event-stream"})
        done = orjson.loads(answer.content)
        done["completion_probabilities"] = [_entry(t) for t in done["tokens"]]
        return httpx.Response(200, json=done)


def _entry(token: int) -> dict:
    return {"id": token, "token": chr(token) if token < 128 else "", "bytes": [token] if token < 128 else []} | {
        "logprob": -0.25,
        "top_logprobs": [],
    }


def asking_for_ids(messages) -> request_pb2.Request:  # type: ignore[no-untyped-def]
    out = request_pb2.Request(model="tiny")
    out.conversation.messages.extend(messages)
    out.sampling.max_output_tokens = 3
    out.logprob_options.require_token_ids = True
    return out


def render(messages) -> list[int]:  # type: ignore[no-untyped-def]
    """What the chat route would see: the template's render with the generation prompt, tokenized with BOS."""
    return tokenize(chatml([{"role": NAMES[m.role], "content": m.parts[0].text} for m in messages], True), True)


@pytest.fixture
async def llama():
    server = FakeServer()
    executor = Executor("http://llama.test", transport=httpx.MockTransport(server))
    yield Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor), server
    await executor.aclose()


async def test_a_first_turn_asking_for_ids_runs_as_a_token_prompt_and_reports_them(llama):
    model, server = llama
    response = await model.arun(asking_for_ids(FIRST))
    assert [path for path, _ in server.calls] == ["/apply-template", "/tokenize", "/completion"]
    assert server.calls[0][1]["add_generation_prompt"] is True
    (prompt,) = server.prompts()
    assert prompt == render(FIRST)  # W: the conversation as the chat route would have tokenized it
    assert list(response.prompt_token_ids) == prompt
    assert list(response.choices[0].sampled_tokens.token_ids) == [111, 107, EOS]
    assert list(response.choices[0].logprobs.token_ids) == [111, 107, EOS]
    assert server.calls[-1][1]["return_tokens"] is True and server.calls[-1][1]["n_probs"] == 1
    assert not response.warnings


async def test_a_streamed_first_turn_reports_the_same_ids(llama):
    model, server = llama
    events = [e async for e in model.astream(asking_for_ids(FIRST))]
    unary = await model.arun(asking_for_ids(FIRST))
    streamed = accumulate(events)
    assert [b.get("stream") for p, b in server.calls if p == "/completion"] == [True, None]
    assert list(streamed.prompt_token_ids) == list(unary.prompt_token_ids) == render(FIRST)
    assert list(streamed.choices[0].sampled_tokens.token_ids) == [111, 107, EOS]


async def test_the_second_turn_extends_the_first_and_the_rollout_reads_whole(llama):
    model, server = llama
    first = await model.arun(asking_for_ids(FIRST))
    sampled = list(first.choices[0].sampled_tokens.token_ids)
    second = await model.arun(asking_for_ids([*FIRST, message(ASSISTANT, "ok", sampled), message(TOOL, "5")]))
    one, two = server.prompts()
    assert two[: len(one)] == one and two[len(one) : len(one) + len(sampled)] == sampled
    read = trajectory([first, second])  # the spec's rule, from the responses alone: no drift, no missing prompt
    assert list(read.tokens) == two + list(second.choices[0].sampled_tokens.token_ids)
    assert read.boundaries.tolist() == [[0, len(one), len(one) + 3], [len(one) + 3, len(two), len(two) + 3]]


async def test_a_first_turn_not_asking_for_ids_stays_on_the_chat_route(llama):
    model, server = llama
    request = asking_for_ids(FIRST)
    request.ClearField("logprob_options")
    response = await model.arun(request)
    assert [path for path, _ in server.calls] == ["/v1/chat/completions"]
    assert not response.prompt_token_ids and not response.warnings


@pytest.mark.parametrize("stream", [False, True])
async def test_a_conversation_ending_with_an_assistant_turn_stays_on_chat_and_says_the_ids_are_missing(llama, stream):
    model, server = llama
    request = asking_for_ids([*FIRST, message(ASSISTANT, "The sum is")])
    if stream:
        response = accumulate([e async for e in model.astream(request)])
    else:
        response = await model.arun(request)
    assert [path for path, _ in server.calls] == ["/v1/chat/completions"]
    assert not response.prompt_token_ids
    assert list(response.choices[0].logprobs.token_ids) == [111]  # the sampled ids still come, with the logprobs
    (warning,) = response.warnings
    assert warning.code == "prompt_token_ids_unavailable"
    assert "ends with what the model answers" in warning.message


def test_the_decision_is_the_transports():
    assert LlamaCpp().runs_as_token_prompt(asking_for_ids(FIRST))
    assert not LlamaCpp().runs_as_token_prompt(asking_for_ids([*FIRST, message(ASSISTANT, "x")]))
    assert Pipeline(LlamaCpp()).prepare(asking_for_ids(FIRST)).native is None  # lowered once its prompt is built
    raw = request_pb2.Request(model="tiny", prompt="2+3?")
    raw.logprob_options.require_token_ids = True
    assert not LlamaCpp().runs_as_token_prompt(raw)  # a raw prompt already goes to /completion with its ids
    # vLLM's chat route reports the prompt's ids itself (`return_token_ids`): its first turn stays there.
    assert not VLLM().runs_as_token_prompt(asking_for_ids(FIRST))


def test_with_no_token_turns_the_plan_is_the_whole_render_and_the_prompt_is_it():
    request = asking_for_ids(FIRST)
    plan = token_prompt.plan(request)
    assert plan.turns == () and plan.sentinels == () and len(plan.renders) == 1
    assert list(plan.renders[0].conversation.messages) == FIRST
    whole = render(FIRST)
    assert token_prompt.assemble(request, plan, [whole], []) == whole
