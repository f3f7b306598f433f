"""Replaying the real llama.cpp, Ollama and sglang recordings (lift, stream lift, tokenize, errors, lower)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from modelir import accumulate, errors
from modelir.calls.tokenizer import out_of_vocabulary
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.transports.sglang import SGLang
from modelir.v1 import content_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2, service_pb2

from tests.recordings import cassette, parse_sse, wire_dir

LLAMA = LlamaCpp()


def _llama(name: str) -> tuple[dict | None, Path]:
    folder = wire_dir("llama_cpp")
    request = folder / f"{name}.request.json"
    response = (
        next(folder.glob(f"{name}.response.*[!s]"))
        if list(folder.glob(f"{name}.response.json"))
        else folder / f"{name}.response.sse"
    )
    return (json.loads(request.read_text()) if request.exists() else None), response


def _ir_from_native(native: dict) -> request_pb2.Request:
    request = request_pb2.Request(model="tiny")
    if isinstance(native["prompt"], list):
        request.token_ids.ids.extend(native["prompt"])
    else:
        request.prompt = native["prompt"]
    if "seed" in native:
        request.sampling.seed = native["seed"]
    if "n_predict" in native:
        request.sampling.max_output_tokens = native["n_predict"]
    if "temperature" in native:
        request.sampling.temperature = native["temperature"]
    if "stop" in native:
        request.sampling.stop.extend(native["stop"])
    if "n_probs" in native:
        request.logprob_options.top_logprob_count = native["n_probs"]
        if native.get("post_sampling_probs"):
            request.logprob_options.basis = logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
    if "grammar" in native:
        request.constraint.grammar.dialect = request_pb2.GRAMMAR_DIALECT_GBNF
        request.constraint.grammar.text = native["grammar"]
    if "json_schema" in native:
        request.constraint.json_schema.schema_json = json.dumps(native["json_schema"])
    return request


NATIVE = [
    "completion__plain",
    "completion__n_probs",
    "completion__n_probs_post_sampling",
    "completion__n_probs_greedy",
    "completion__n_probs_greedy_post_sampling",
    "completion__return_tokens",
    "completion__grammar",
    "completion__grammar_post_sampling",
    "completion__json_schema",
    "completion__stop_word",
    "completion__prompt_token_ids",
]


@pytest.mark.parametrize("name", NATIVE)
def test_llamacpp_native_completion_lower_and_lift(name):
    native, response_path = _llama(name)
    request = _ir_from_native(native)
    sent = json.loads(LLAMA.lower(request, stream=False).body)
    # We always ask for the sampled ids (return_tokens); everything the recording sent, we send the same.
    assert {k: v for k, v in sent.items() if k != "return_tokens"} == {
        k: v for k, v in native.items() if k != "return_tokens"
    }
    body = json.loads(response_path.read_text())
    response = LLAMA.lift(request, HttpResponse(200, {}, response_path.read_bytes()))
    choice = response.choices[0]
    assert choice.message.parts[0].text == body["content"]
    assert choice.raw_finish_reason == body["stop_type"]
    assert response.usage.output_token_count == body["tokens_predicted"]
    if "completion_probabilities" in body:
        probabilities = body["completion_probabilities"]
        assert list(choice.logprobs.token_ids) == [p["id"] for p in probabilities]
        assert choice.logprobs.token_bytes == b"".join(bytes(p["bytes"]) for p in probabilities)
        post = "prob" in probabilities[0]
        assert choice.logprobs.basis == (
            logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING if post else logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
        )
    if body["stop_type"] == "word":
        assert choice.stop_sequence == body["stopping_word"]


def test_llamacpp_native_stream_equals_the_final_totals():
    native, path = _llama("completion__stream_n_probs")
    request = _ir_from_native(native)
    events = parse_sse(path.read_text())
    lifter = LLAMA.stream_lifter(request)
    lifted = [e for name, data in events for e in lifter.feed(RawEvent(name, data.encode()))]
    response = accumulate([*lifted, *lifter.close()])
    chunks = [json.loads(d) for _, d in events]
    assert response.choices[0].message.parts[0].text == "".join(c["content"] for c in chunks)
    assert list(response.choices[0].logprobs.token_ids) == [
        p["id"] for c in chunks for p in c.get("completion_probabilities", [])
    ]
    assert not bool(response.errors) and response.model == chunks[-1]["model"]
    # Each event's sampled id rides on its delta, attributed to the one text part (the limit ended it: no EOS).
    ids = [t for c in chunks for t in c.get("tokens", [])]
    assert list(response.choices[0].sampled_tokens.token_ids) == ids
    assert list(response.choices[0].sampled_tokens.part_indexes) == [0] * len(ids)


def test_llamacpp_recorded_sampled_ids_are_the_answers_tokens():
    native, path = _llama("completion__return_tokens")
    body = json.loads(path.read_text())
    response = LLAMA.lift(_ir_from_native(native), HttpResponse(200, {}, path.read_bytes()))
    tokens = response.choices[0].sampled_tokens
    # `tokens` (return_tokens, which we always send) is the truth, whether or not logprobs were asked for; the
    # limit ended this answer, so every id belongs to the one text part.
    assert body["stop_type"] == "limit" and list(tokens.token_ids) == body["tokens"] and len(body["tokens"]) == 6
    assert list(tokens.part_indexes) == [0] * 6
    assert not response.choices[0].HasField("logprobs")


@pytest.mark.parametrize(
    "name",
    [
        "v1_chat_completions__logprobs",
        "v1_chat_completions__response_format_json_schema",
        "v1_chat_completions__qwen25_tool_call_prefill",
    ],
)
def test_llamacpp_chat_bodies_lift(name):
    _, path = _llama(name)
    body = json.loads(path.read_text())
    request = request_pb2.Request(model="tiny")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
    response = LLAMA.lift(request, HttpResponse(200, {}, path.read_bytes()))
    message = body["choices"][0]["message"]
    texts = [p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text"]
    # `content: ""` (the tool-call answer's) is no content, as in the stream, which sends none: no text part.
    assert texts == ([message["content"]] if message.get("content") else [])
    if body["choices"][0].get("logprobs"):
        content = body["choices"][0]["logprobs"]["content"]
        assert list(response.choices[0].logprobs.token_ids) == [e["id"] for e in content]
    calls = [p.tool_call for p in response.choices[0].message.parts if p.WhichOneof("content") == "tool_call"]
    assert [c.name for c in calls] == [t["function"]["name"] for t in message.get("tool_calls") or []]


def test_llamacpp_chat_stream_recordings():
    for name in (
        "v1_chat_completions__stream_include_usage",
        "v1_chat_completions__stream_logprobs",
        "v1_chat_completions__qwen25_tool_call_prefill_stream",
    ):
        _, path = _llama(name)
        events = parse_sse(path.read_text())
        request = request_pb2.Request(model="tiny")
        request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
        lifter = LLAMA.stream_lifter(request)
        lifted = [e for n, d in events for e in lifter.feed(RawEvent(n, d.encode()))]
        response = accumulate([*lifted, *lifter.close()])
        assert not bool(response.errors), (name, list(response.errors))
        assert response.choices[0].raw_finish_reason


def test_llamacpp_tokenize_and_detokenize_recordings():
    request = service_pb2.TokenizeRequest(model="tiny", text="Hello world, café ü 日本 <|im_start|>")
    _, path = _llama("tokenize__with_pieces")
    body = json.loads(path.read_text())
    tokens = LLAMA.lift_tokenize(request, [HttpResponse(200, {}, path.read_bytes())])
    assert list(tokens.token_ids) == [t["id"] for t in body["tokens"]]
    assert tokens.token_bytes.decode() == request.text  # byte-list pieces ("ü" as 195, 188) rejoin exactly
    _, detok = _llama("detokenize__plain")
    assert LLAMA.lift_detokenize(HttpResponse(200, {}, detok.read_bytes())).startswith("<s>Hello")


@pytest.mark.parametrize(
    ("name", "error_type"),
    [
        ("error__completion_invalid_json", errors.ProviderUnavailableError),
        ("error__completion_missing_prompt", errors.ProviderRejectedError),
        ("error__completion_prompt_too_long", errors.ProviderRejectedError),
        ("error__completion_invalid_grammar", errors.ProviderRejectedError),
        ("error__v1_chat_top_logprobs_without_logprobs", errors.ProviderRejectedError),
        ("error__embedding_not_enabled", errors.ProviderRejectedError),  # 501: not started with --embeddings
        ("error__not_found", errors.ProviderRejectedError),
    ],
)
def test_llamacpp_error_recordings(name, error_type):
    folder = wire_dir("llama_cpp")
    path = folder / f"{name}.response.json"
    status = int((folder / f"{name}.response.headers").read_text().split()[1])
    error = LLAMA.error(HttpResponse(status, {}, path.read_bytes()))
    assert isinstance(error, error_type) and error.message


def test_llamacpp_echo_is_ignored_so_scoring_is_rejected():
    # The recording shows echo silently ignored (the same body as without it): hence no INPUT_SCORING claim.
    _, with_echo = _llama("v1_completions__echo_logprobs")
    _, without = _llama("v1_completions__logprobs3")
    strip = lambda b: {k: v for k, v in json.loads(b.read_text()).items() if k not in ("id", "created", "timings")}  # noqa: E731
    assert strip(with_echo)["choices"] == strip(without)["choices"]
    from modelir.v1 import capabilities_pb2

    assert capabilities_pb2.CAPABILITY_INPUT_SCORING not in LLAMA.manifest().capabilities


# ---- Ollama ------------------------------------------------------------------------------------------


def test_ollama_recordings():
    transport = Ollama()
    folder = wire_dir("ollama")
    seen = 0
    for path in sorted(folder.glob("openllmetry__*.yaml")):
        for exchange in cassette(path):
            seen += 1
            sent = exchange.request_body
            request = request_pb2.Request(model=sent["model"])
            if "messages" in sent:
                request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="x")
            else:
                request.prompt = sent["prompt"]
            if exchange.sse is None and b'"done":false' in exchange.body:
                lines = [("", line) for line in exchange.body.decode().splitlines() if line.strip()]
                lifter = transport.stream_lifter(request)
                lifted = [e for n, d in lines for e in lifter.feed(RawEvent(n, d.encode()))]
                response = accumulate([*lifted, *lifter.close()])
                chunks = [json.loads(d) for _, d in lines]
                key = "response" if "prompt" in sent else "message"
                text = "".join(c[key] if key == "response" else c[key]["content"] for c in chunks)
                assert response.choices[0].message.parts[-1].text == text and not bool(response.errors)
                assert response.usage.output_token_count == chunks[-1]["eval_count"]
                continue
            body = json.loads(exchange.body)
            response = transport.lift(request, HttpResponse(200, {}, exchange.body))
            text = body["message"]["content"] if "message" in body else body["response"]
            assert [p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text"] == [text]
            assert response.usage.input_token_count == body["prompt_eval_count"]
            assert response.timing.provider_output_duration.ToNanoseconds() == body["eval_duration"]
    assert seen >= 4


# ---- sglang ------------------------------------------------------------------------------------------


def test_sglang_recorded_plain_generate():
    excerpt = json.loads((wire_dir("sglang") / "sglang_docs_ci__generate_plain_meta_info.excerpt.json").read_text())
    body = ast.literal_eval(excerpt["response_python_repr_verbatim"])  # a printed dict, not raw JSON bytes
    request = request_pb2.Request(model="qwen", prompt=excerpt["request_json"]["text"])
    assert json.loads(SGLang().lower(request, stream=False).body) == {**excerpt["request_json"], "sampling_params": {}}
    response = SGLang().lift(request, HttpResponse(200, {}, json.dumps(body).encode()))
    choice = response.choices[0]
    assert choice.message.parts[0].text == body["text"]
    assert choice.raw_finish_reason == '{"type":"length","length":128}'
    assert response.usage.output_token_count == 128 and response.id == body["meta_info"]["id"]


# ---- our own recordings of the live engines (conformance/recordings, written by tests/engines/recorder.py) ------

OURS = Path(__file__).resolve().parents[1] / "conformance" / "recordings"


def _generate_files() -> list[Path]:
    return sorted(OURS.glob("*/generate.jsonl"))


def _tokenize_lines() -> list[tuple[Path, dict]]:
    return [(p, json.loads(line)) for p in sorted(OURS.glob("*/tokenize.jsonl")) for line in p.read_text().splitlines()]


def _learned_tokenizer_info(path: Path, test: str, transport):
    """The tokenizer facts the `tokenizer_info` line of the same test (one model per test) learned, lifted again."""
    from google.protobuf import json_format

    (line,) = [
        line
        for p, line in _tokenize_lines()
        if p == path and line["operation"] == "tokenizer_info" and line["key"].rsplit("#", 1)[0] == test
    ]
    answers = [_answer(json_format.ParseDict(a, response_pb2.RawExchange())) for a in line["answers"]]
    return transport.lift_tokenizer_info(answers)


def _transport_of(folder: Path):
    from modelir.records.files import read_header
    from modelir.registry import build_transport

    header = read_header(folder / "generate.jsonl")
    assert header is not None
    return build_transport(header.run_metadata["transport"], json.loads(header.run_metadata["transport_options"]))


def _answer(raw: response_pb2.RawExchange) -> HttpResponse:
    return HttpResponse(
        raw.http_status,
        {h.name: h.value for h in raw.response_headers}
        | ({"content-type": raw.content_type} if raw.content_type else {}),
        raw.body,
    )


def _differs(want, got) -> str:
    from google.protobuf import json_format

    return f"\nrecorded: {json_format.MessageToJson(want)}\nreplayed: {json_format.MessageToJson(got)}"


def test_every_live_engine_has_recordings():
    engines = {p.parent.name.rsplit("-", 1)[0] for p in _generate_files()}
    assert engines >= {"llama-server", "llama-cpp-python", "ollama", "vllm"}, engines


@pytest.mark.parametrize("path", _generate_files(), ids=lambda p: p.parent.name)
def test_live_recordings_lower_and_lift_to_what_the_live_run_saw(path):
    """Every generation a live suite had: the request lowers to the body that was sent, and the engine's raw
    answer lifts (unary or streamed, or as an error) to exactly the response (or failure) modelir gave live."""
    from modelir.errors.soft import received
    from modelir.records.files import read_records
    from modelir.transports.base import guarded_error, utf8_repaired
    from modelir.v1 import record_pb2

    transport = _transport_of(path.parent)
    replayed = 0
    for record in read_records(path):
        raw, request = record.response.raw, record.request
        sent = json.loads(raw.request_body)
        stream = bool(raw.stream_events) or sent.get("stream") is True
        assert json.loads(transport.lower(request, stream=stream).body) == sent, record.key
        if record.status == record_pb2.RECORD_STATUS_FAILED:
            error = guarded_error(transport, _answer(raw)).to_response_error()
            assert error == record.failure, record.key + _differs(record.failure, error)
            replayed += 1
            continue
        if stream:
            lifter = transport.stream_lifter_accounted(request)
            events = [
                e for raw_event in raw.stream_events for e in lifter.feed(RawEvent(raw_event.event, raw_event.data))
            ]
            events.extend(lifter.close())
            for event in events:
                if event.WhichOneof("event") == "end":
                    received(event.end, "", ())
            got = accumulate(events)
        else:
            body, damage = utf8_repaired(raw.body)
            answer = _answer(raw)
            transport.check_answer_shape(answer)
            got = transport.lift_accounted(request, HttpResponse(answer.status, answer.headers, body))
            received(got, damage, ())
        got.raw.CopyFrom(raw)
        assert got == record.response, record.key + _differs(record.response, got)
        replayed += 1
    assert replayed


@pytest.mark.parametrize(("path", "line"), _tokenize_lines(), ids=lambda v: v["key"] if isinstance(v, dict) else "")
def test_live_tokenize_recordings_lower_and_lift_to_what_the_live_run_saw(path, line):
    from google.protobuf import json_format
    from modelir.transports.base import guarded_error

    transport = _transport_of(path.parent)
    answers = [json_format.ParseDict(a, response_pb2.RawExchange()) for a in line["answers"]]
    if line["operation"] == "tokenizer_info":  # the facts a detokenize checks ids against, learned once
        assert [n.body for n in transport.lower_tokenizer_info(line["model"])] == [a.request_body for a in answers]
        info = transport.lift_tokenizer_info([_answer(a) for a in answers])
        assert json_format.MessageToDict(info) == line["result"]
        return
    if line["operation"] == "detokenize" and not answers:  # refused before any call: against the learned facts
        learned = _learned_tokenizer_info(path, line["key"].rsplit("#", 1)[0], transport)
        refusal = out_of_vocabulary(line["token_ids"], learned)
        assert refusal is not None and json_format.MessageToDict(refusal.to_response_error()) == line["error"]
        return
    if line["operation"] == "tokenize":
        request = json_format.ParseDict(line["request"], service_pb2.TokenizeRequest())
        natives = transport.lower_tokenize(request)[: len(answers)]
    else:
        natives = [transport.lower_detokenize(line["token_ids"])]
    assert [n.body for n in natives] == [a.request_body for a in answers]
    try:
        if any(a.http_status >= 400 for a in answers):
            raise guarded_error(transport, _answer(next(a for a in answers if a.http_status >= 400)))
        if line["operation"] == "tokenize":
            result = json_format.MessageToDict(transport.lift_tokenize(request, [_answer(a) for a in answers]))
        else:
            result = transport.lift_detokenize(_answer(answers[0]))
    except errors.ModelError as exc:
        assert json_format.MessageToDict(exc.to_response_error()) == line.get("error")
        return
    assert "error" not in line and result == line["result"]


def _recorded(engine: str, test: str) -> list:
    from modelir.records.files import read_records

    (path,) = [p for p in _generate_files() if p.parent.name.startswith(engine + "-")]
    return [r for r in read_records(path) if r.key.rsplit("#", 1)[0] == test]


def test_llamacpp_chat_flags_generated_tokens_without_logprobs():
    """llama-server's chat answer has no logprob entry for a token that ends inside a UTF-8 character, and no ids
    to align to: 4 entries for 5 generated tokens were passed on silently, unary and streamed."""
    records = _recorded("llama-server", "test_chat_with_a_system_message")
    assert len(records) == 2  # unary, streamed
    for record in records:
        raw = record.response.raw
        if raw.stream_events:
            lifter = LLAMA.stream_lifter(record.request)
            events = [e for r in raw.stream_events for e in lifter.feed(RawEvent(r.event, r.data))]
            response = accumulate([*events, *lifter.close()])
        else:
            response = LLAMA.lift(record.request, HttpResponse(200, {}, raw.body))
        assert len(response.choices[0].logprobs.token_logprobs) == 4 and response.usage.output_token_count == 5
        (error,) = response.errors
        assert error.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS and "4 of the 5 tokens" in error.message


def _relifted(transport, record):
    raw = record.response.raw
    if raw.stream_events:
        lifter = transport.stream_lifter(record.request)
        events = [e for r in raw.stream_events for e in lifter.feed(RawEvent(r.event, r.data))]
        return accumulate([*events, *lifter.close()])
    return transport.lift(record.request, HttpResponse(200, {}, raw.body))


def _engine_records(engine: str) -> list:
    from modelir.records.files import read_records

    (path,) = [p for p in _generate_files() if p.parent.name.startswith(engine + "-")]
    return [r for r in read_records(path) if r.response.raw.body or r.response.raw.stream_events]


def test_ollama_tokens_spelled_as_replacement_characters_are_named():
    """Ollama renders a token that ends inside a UTF-8 character as U+FFFD, in `token` and `bytes` alike, and gives
    no id to recover its bytes from: modelir names those positions (before, the replacement's bytes passed for the
    token's)."""
    flagged = 0
    for record in _engine_records("ollama"):
        response = _relifted(Ollama(provider_model="tiny"), record)
        tokens = list(response.choices[0].logprobs.tokens) if response.choices else []
        warned = [w for w in response.warnings if w.code == "token_bytes_replaced"]
        assert bool(warned) == any("\ufffd" in t for t in tokens), record.key
        flagged += bool(warned)
    assert flagged


def test_vllm_tokens_without_text_are_named():
    """vLLM never flushes a token that ends inside a UTF-8 character (`token: ""`, `bytes: []`): modelir names
    those positions, unary and streamed (before, they passed as tokens with no text)."""
    from modelir.transports.vllm import VLLM

    flagged = 0
    for record in _engine_records("vllm"):
        response = _relifted(VLLM(provider_model="tiny"), record)
        for choice in response.choices:
            lost = [i for i, t in enumerate(choice.logprobs.tokens) if t == ""]
            natural = choice.finish_reason == response_pb2.FINISH_REASON_STOP
            lost = [i for i in lost if not (natural and i == len(choice.logprobs.tokens) - 1)]
            warned = [w for w in response.warnings if w.code == "token_text_lost"]
            assert bool(warned) == bool(lost), record.key
            flagged += bool(warned)
    assert flagged


def test_ollama_images_are_checked_before_the_call_never_in_the_lift():
    """Ollama answers an image to a model without vision with a 200, ignoring it: whether the model reads images is
    learned from `/api/show` before the call (`ollama_show`), so the recorded image answers (sent with `vision:
    true`) lift without a word about images, whatever the `vision` option; configured `vision: false`, the
    transport does not claim IMAGE_INPUT (refused before any call)."""
    from modelir.pipeline.prepare import Pipeline
    from modelir.v1 import capabilities_pb2

    with_images = [
        r
        for r in _engine_records("ollama")
        if any(p.WhichOneof("content") == "blob" for m in r.request.conversation.messages for p in m.parts)
    ]
    assert with_images
    for record in with_images:
        for transport in (Ollama(provider_model="tiny"), Ollama(vision=True)):
            assert "image_input_unverified" not in [w.code for w in _relifted(transport, record).warnings]
        assert Ollama().lower_model_facts(record.request) is not None  # asked first when `vision` is unset
        assert Ollama(vision=True).lower_model_facts(record.request) is None
        with pytest.raises(errors.UnsupportedCapabilityError, match="IMAGE_INPUT"):
            Pipeline(Ollama(vision=False)).check(record.request)
    assert capabilities_pb2.CAPABILITY_IMAGE_INPUT in Ollama().manifest().capabilities
