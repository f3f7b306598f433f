"""Multi-turn token-in, live on llama-server and vLLM (`transports/token_prompt.py`): a four-turn tool-calling
rollout that asks for token ids on every turn, whose every prompt, as the engine reports it, is the previous prompt,
the turn's sampled ids unchanged and the rendered new messages, from the first turn on (llama-server's runs as a
token-id prompt with no token turns, `LlamaCpp.runs_as_token_prompt`; vLLM's chat route reports its prompt), so the
trajectory reads whole from the responses alone; the same rollout done the naive way (text round trip) differs where
re-tokenization merges what the model sampled apart; a conversation ending with an assistant turn keeps the chat
route (on llama-server with a `prompt_token_ids_unavailable` warning); and a template that is not prefix-preserving
is refused, naming the turn.

Every turn is forced (a grammar or regex that allows one text, and a logit bias that bans every merged token), so
the sampled ids are byte tokens whatever the tiny model's weights say, and the drift is deterministic: the chat
template's text of such a turn re-tokenizes into merged tokens. Under MODELIR_RECORD=1 each call is written as a
conformance case into `conformance/recordings/<engine>-<version>/token_in/` (renders, the prompt, the answer),
replayed by `tests/test_recordings_token_in.py` in `make test`.
"""

from __future__ import annotations

import json
import os
import re

import httpx
import orjson
import pytest
from google.protobuf import json_format
from modelir import Model, errors, trajectory
from modelir.http.executor import Executor
from modelir.transports import token_prompt
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.vllm import VLLM
from modelir.v1 import content_pb2, request_pb2, response_pb2

from tests.engines import launch, recorder

BUILDS = {"llama-server": os.environ.get("MODELIR_LLAMA_SERVER"), "vllm": os.environ.get("MODELIR_VLLM")}
MERGED = range(256, 352)  # the tiny vocabulary: 256 bytes, then its merges, then four control tokens
IM_END = 355
# The rollout: the user asks, the model calls `add` three times (each result comes back as a tool turn) and
# answers. " a" is one merged token in the vocabulary: sampled as two bytes, its text re-tokenizes as one.
TURNS = ["I add(2,3)", "then add(5,4)", "then add(9,1)", "it is 10"]
RESULTS = ["5", "9", "10"]


class KeepingExecutor(Executor):
    """An executor that keeps every exchange, for the recordings."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.kept: list[tuple[HttpRequest, HttpResponse]] = []

    async def send(self, native, **kwargs):  # type: ignore[no-untyped-def]
        sent = await super().send(native, **kwargs)
        self.kept.append((native, sent.response))
        return sent


@pytest.fixture(scope="module", params=["llama-server", "vllm"])
def engine(request, tmp_path_factory):
    name = request.param
    if not BUILDS[name]:
        pytest.skip(f"set {'MODELIR_LLAMA_SERVER' if name == 'llama-server' else 'MODELIR_VLLM'}")
    folder = tmp_path_factory.mktemp(name)
    if name == "vllm" and (url := os.environ.get("MODELIR_VLLM_URL")):
        yield name, url
    elif name == "vllm":
        with launch.vllm_server(BUILDS[name], folder, 512) as url:
            yield name, url
    else:
        with launch.llama_server(BUILDS[name], folder, "-c", "1024") as url:
            yield name, url


@pytest.fixture
async def model(engine):
    name, url = engine
    executor = KeepingExecutor(url)
    transport = LlamaCpp(provider_model="tiny") if name == "llama-server" else VLLM(provider_model="tiny")
    yield Model(transport, name="tiny", executor=executor)
    await executor.aclose()


def forced(request: request_pb2.Request, text: str, engine: str) -> request_pb2.Request:
    """`request` forced to answer exactly `text`, spelled in byte tokens (every merged token banned)."""
    out = request_pb2.Request()
    out.CopyFrom(request)
    if engine == "llama-server":
        out.constraint.grammar.dialect = request_pb2.GRAMMAR_DIALECT_GBNF
        out.constraint.grammar.text = f"root ::= {json.dumps(text)}"
    else:
        out.constraint.regex = re.escape(text)
    for token in MERGED:
        out.sampling.logit_bias[token] = -100.0
    out.sampling.max_output_tokens = len(text) + 2
    out.sampling.temperature = 0.0
    return out


def sampled_ids(response: response_pb2.Response) -> list[int]:
    """The ids the turn was sampled as."""
    return list(response.choices[0].sampled_tokens.token_ids)


def add(request: request_pb2.Request, role: int, text: str, ids: list[int] | None = None) -> None:
    message = request.conversation.messages.add(role=role, token_ids=ids or [])
    message.parts.add().text = text


def tokenize(url: str, engine: str, text: str) -> list[int]:
    """The engine's own tokenization of `text`, special tokens parsed, none added."""
    if engine == "llama-server":
        answer = httpx.post(url + "/tokenize", json={"content": text, "add_special": False, "parse_special": True})
    else:
        answer = httpx.post(url + "/tokenize", json={"model": "tiny", "prompt": text, "add_special_tokens": False})
    return list(answer.json()["tokens"])


def chat_prompt(url: str, engine: str, request: request_pb2.Request, model: Model) -> list[int]:
    """The prompt the engine's chat route builds for `request` as text (the naive way's), as it reports it."""
    messages = model.transport._chat.body(request, stream=False)["messages"]  # type: ignore[attr-defined]
    if engine == "llama-server":
        text = httpx.post(url + "/apply-template", json={"messages": messages}).json()["prompt"]
        answer = httpx.post(url + "/tokenize", json={"content": text, "add_special": True, "parse_special": True})
    else:
        answer = httpx.post(url + "/tokenize", json={"model": "tiny", "messages": messages})
    return list(answer.json()["tokens"])


async def run(model: Model, request: request_pb2.Request, engine: str, test: str) -> response_pb2.Response:
    """`model.arun(request)`, written as a conformance case under MODELIR_RECORD (unless `test` is empty)."""
    executor = model.executor
    assert isinstance(executor, KeepingExecutor)
    executor.kept.clear()
    response = await model.arun(request)
    if recorder.ENABLED and test:
        _record(model, request, executor.kept, engine, test)
    return response


async def rollout(model: Model, engine: str, url: str, test: str) -> tuple[list[response_pb2.Response], list]:
    conversation = request_pb2.Request(model="tiny")
    add(conversation, content_pb2.ROLE_SYSTEM, "Call add(a,b) to add; then answer.")
    add(conversation, content_pb2.ROLE_USER, "2+3+4+1?")
    responses, turns = [], []
    for k, text in enumerate(TURNS):
        request = forced(conversation, text, engine)
        request.logprob_options.require_token_ids = True  # a trainer's ask: every turn's prompt and sampled ids
        response = await run(model, request, engine, test)
        ids = sampled_ids(response)
        assert "".join(p.text for p in response.choices[0].message.parts) == text
        assert all(t not in MERGED for t in ids)  # forced to bytes
        responses.append(response)
        turns.append(ids)
        add(conversation, content_pb2.ROLE_ASSISTANT, text, ids)
        if k < len(RESULTS):
            add(conversation, content_pb2.ROLE_TOOL, RESULTS[k])
    return responses, turns


async def test_a_four_turn_rollout_never_changes_an_earlier_id(model, engine):
    name, url = engine
    responses, turns = await rollout(model, name, url, "rollout")
    prompts = [list(r.prompt_token_ids) for r in responses]
    opening = request_pb2.Request(model="tiny")
    add(opening, content_pb2.ROLE_SYSTEM, "Call add(a,b) to add; then answer.")
    add(opening, content_pb2.ROLE_USER, "2+3+4+1?")
    assert prompts[0] == chat_prompt(url, name, opening, model)  # the first turn: what the chat route would see
    for k, prompt in enumerate(prompts):
        assert responses[k].usage.input_token_count == len(prompt)  # the engine's own count of what it saw
        assert not responses[k].warnings, responses[k].warnings
    for k in range(1, len(TURNS)):
        previous, prompt, sampled = prompts[k - 1], prompts[k], turns[k - 1]
        assert prompt[: len(previous)] == previous  # the earlier prompt, unchanged
        assert prompt[len(previous) : len(previous) + len(sampled)] == sampled  # the turn's ids, unchanged
        new = tokenize(url, name, f"<|im_end|>\n<|im_start|>tool\n{RESULTS[k - 1]}<|im_end|>\n<|im_start|>assistant\n")
        if sampled[-1] == new[0] == IM_END:  # the end-of-turn token the model sampled is the template's close
            new = new[1:]
        assert prompt[len(previous) + len(sampled) :] == new  # only the new messages, rendered and tokenized
    # The whole trajectory, from the responses alone (the spec's rule): every prompt extends the sequence so far.
    read = trajectory(responses)
    final = prompts[-1]
    assert list(read.tokens) == final + turns[-1]
    assert read.boundaries.tolist() == [
        [len(prompts[k - 1]) + len(turns[k - 1]) if k else 0, len(prompts[k]), len(prompts[k]) + len(turns[k])]
        for k in range(len(TURNS))
    ]
    assert int(read.loss_mask.sum()) == sum(len(ids) for ids in turns)
    print(f"\n{name}: final prompt ({len(final)} ids): {final}")
    for k, ids in enumerate(turns):
        print(f"{name}: turn {k + 1} {TURNS[k]!r}: prompt {len(prompts[k])} ids, sampled {ids}")
    print(f"{name}: trajectory {read!r}")


async def test_the_naive_text_round_trip_changes_the_ids_the_model_sampled(model, engine):
    name, url = engine
    responses, turns = await rollout(model, name, url, "")  # the rollout test records the same calls
    conversation = request_pb2.Request(model="tiny")
    add(conversation, content_pb2.ROLE_SYSTEM, "Call add(a,b) to add; then answer.")
    add(conversation, content_pb2.ROLE_USER, "2+3+4+1?")
    for k, text in enumerate(TURNS[:-1]):
        add(conversation, content_pb2.ROLE_ASSISTANT, text)  # the naive way: text only, re-rendered
        add(conversation, content_pb2.ROLE_TOOL, RESULTS[k])
    naive = chat_prompt(url, name, conversation, model)
    token_in = list(responses[-1].prompt_token_ids)
    assert naive != token_in
    parted = next(i for i, (a, b) in enumerate(zip(naive, token_in, strict=False)) if a != b)
    drifted = [k for k, ids in enumerate(turns[:-1]) if not _contains(naive, ids)]
    print(
        f"\n{name}: naive and token-in prompts part at id {parted}: naive {naive[parted : parted + 6]}, token-in "
        f"{token_in[parted : parted + 6]}; turns whose sampled ids the naive prompt lost: {drifted}"
    )
    assert drifted  # some turn's sampled ids are not in the naive prompt: re-tokenization merged them
    assert all(_contains(token_in, ids) for ids in turns[:-1])


async def test_a_turn_to_continue_stays_on_the_chat_route_and_says_its_prompt_ids_are_missing(model, engine):
    """A conversation ending with an assistant turn cannot run as a token-id prompt: on llama-server it keeps the
    chat route, with the sampled ids (beside the logprobs) and a warning for the prompt's; vLLM's chat route reports
    both."""
    name, _ = engine
    request = request_pb2.Request(model="tiny")
    add(request, content_pb2.ROLE_USER, "2+3?")
    add(request, content_pb2.ROLE_ASSISTANT, "It is")
    request.sampling.max_output_tokens = 3
    request.sampling.temperature = 0.0
    request.logprob_options.require_token_ids = True
    executor = model.executor
    response = await run(model, request, name, "")
    assert isinstance(executor, KeepingExecutor)
    assert [native.path for native, _ in executor.kept] == ["/v1/chat/completions"]  # no renders: the chat route
    assert response.choices[0].logprobs.token_ids  # the sampled ids, beside the logprobs
    if name == "llama-server":
        assert not response.prompt_token_ids
        assert [w.code for w in response.warnings] == ["prompt_token_ids_unavailable"]
    else:
        assert response.prompt_token_ids and not response.warnings


def _contains(sequence: list[int], part: list[int]) -> bool:
    body = [t for t in part if t != IM_END]  # the naive template writes its own close
    return any(sequence[i : i + len(body)] == body for i in range(len(sequence) - len(body) + 1))


LATEST = (
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if loop.last and message['role'] == 'user' -%}{{- '(latest) ' -}}{%- endif -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


async def test_a_template_that_is_not_prefix_preserving_is_refused_live(engine, tmp_path):
    name, _ = engine
    if name != "llama-server":
        pytest.skip("a template of our own is cheap to serve on llama-server only")
    template = tmp_path / "latest.jinja"
    template.write_text(LATEST)
    assert BUILDS[name] is not None
    with launch.llama_server(
        BUILDS[name], tmp_path, "-c", "1024", "--jinja", "--chat-template-file", str(template)
    ) as url:
        executor = KeepingExecutor(url)
        model = Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor)
        request = request_pb2.Request(model="tiny")
        add(request, content_pb2.ROLE_USER, "2+3?")
        add(request, content_pb2.ROLE_ASSISTANT, "add(2,3)", [97, 100, 100])
        add(request, content_pb2.ROLE_USER, "and?")
        with pytest.raises(errors.InvalidRequestError) as caught:
            await model.arun(request)
        await executor.aclose()
    assert [v.field for v in caught.value.violations] == ["conversation.messages[1].token_ids"]
    assert all(native.path != "/completion" for native, _ in executor.kept)  # refused before generating


def _record(model: Model, request: request_pb2.Request, kept: list, engine: str, test: str) -> None:
    """One call as a conformance case: its render rounds (token-in), the request sent, the answer, the lift."""
    transport = model.transport
    assert isinstance(transport, HttpTransport)
    build = BUILDS[engine]
    assert build is not None
    folder = recorder.RECORDINGS / f"{engine}-{recorder.engine_version(engine, build)}" / "token_in"
    folder.mkdir(parents=True, exist_ok=True)
    case: dict = {
        "description": f"Recorded live ({engine}): {test}.",
        "transport_options": {"provider_model": "tiny"},
        "proves": [],
        "request": json_format.MessageToDict(request),
    }
    run_request, at = request, 0
    if transport.runs_as_token_prompt(request):  # a token-in conversation, or llama-server's first turn
        plan = token_prompt.plan(request)
        steps = transport.token_prompt_steps(plan)
        natives, rounds = next(steps), []
        try:
            while True:
                answers = [answer for _, answer in kept[at : at + len(natives)]]
                rounds.append(
                    {
                        "expected_http_requests": [_native(n) for n in natives],
                        "http_responses": [_answer(a) for a in answers],
                    }
                )
                at += len(natives)
                natives = steps.send(answers)
        except StopIteration as done:
            rendered, sentinels = done.value
        case["token_prompt_rounds"] = rounds
        run_request = token_prompt.token_request(request, token_prompt.assemble(request, plan, rendered, sentinels))
    native, answer = kept[at]
    case["expected_http_request"] = _native(native)
    case["http_response"] = _answer(answer)
    case["expected_response"] = json_format.MessageToDict(transport.lift_accounted(run_request, answer))
    number = len(list(folder.glob(f"{test}-*.json"))) + 1
    (folder / f"{test}-{number}.json").write_text(_compact_json(case))


def _compact_json(value: object, depth: int = 0) -> str:
    """Indented JSON with each list of numbers on one line (token ids: hundreds of them per call)."""
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {_compact_json(v, depth + 1)}" for k, v in value.items()]
        text = "{\n" + ",\n".join(items) + f"\n{pad}}}"
    elif isinstance(value, list) and value and not all(type(v) in (int, float) for v in value):
        text = "[\n" + ",\n".join(inner + _compact_json(v, depth + 1) for v in value) + f"\n{pad}]"
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text + ("\n" if depth == 0 else "")


def _native(native: HttpRequest) -> dict:
    return {"method": native.method, "path": native.path, "body": orjson.loads(native.body)}


def _answer(answer: HttpResponse) -> dict:
    return {
        "status": answer.status,
        "headers": {"content-type": answer.headers.get("content-type", "")},
        "body": orjson.loads(answer.body),
    }


def _fresh_recordings() -> None:
    """A recording run rewrites this suite's cases (older ones would be replayed beside the new)."""
    for engine, build in BUILDS.items():
        if build:
            folder = recorder.RECORDINGS / f"{engine}-{recorder.engine_version(engine, build)}" / "token_in"
            for old in folder.glob("*.json"):
                old.unlink()


if recorder.ENABLED:
    _fresh_recordings()
