"""Every llamacpp capability and rejection against a real llama-server (built from PyPI source by
`engines/llamacpp/build.sh`) serving a tiny generated model. Run with `make test-engines`; skipped otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import jsonschema
import numpy as np
import orjson
import pytest
from modelir import Model, UnsupportedCapabilityError, accumulate, aclassify, build_request, errors
from modelir.http.executor import Executor
from modelir.transports.llamacpp import LlamaCpp
from modelir.v1 import errors_pb2, logprobs_pb2, request_pb2, response_pb2

from tests.engines import launch, numpy_truth, recorder

SERVER = os.environ.get("MODELIR_LLAMA_SERVER")
pytestmark = pytest.mark.skipif(not SERVER, reason="set MODELIR_LLAMA_SERVER (make test-engines builds and sets it)")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert SERVER is not None
    with launch.llama_server(SERVER, tmp_path_factory.mktemp("llama")) as url:
        yield url


@pytest.fixture
async def model(server):
    executor = Executor(server)
    yield Model(recorder.transport("llamacpp", provider_model="tiny"), name="tiny", executor=executor)
    await executor.aclose()


def _text(response: response_pb2.Response) -> str:
    return "".join(p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text")


async def test_completion_with_every_sampling_control_is_reproducible(model):
    request = build_request(
        "tiny", prompt="Hello world, the", max_output_tokens=6, temperature=0.8, top_p=0.9, top_k=40, seed=42
    )
    request.sampling.min_p = 0.05
    request.sampling.presence_penalty = 0.1
    request.sampling.frequency_penalty = 0.1
    request.sampling.repetition_penalty = 1.1
    first, second = await model.arun(request), await model.arun(request)
    assert _text(first) == _text(second) and _text(first)
    assert first.usage.output_token_count == 6 and first.usage.input_token_count > 0
    assert first.choices[0].finish_reason == response_pb2.FINISH_REASON_LENGTH
    assert first.timing.provider_output_duration.ToNanoseconds() > 0


async def test_token_input_and_sampled_logprobs_with_ids_and_bytes(model):
    request = build_request("tiny", token_ids=[353, 72, 101], max_output_tokens=5, seed=7, top_logprobs=3)
    request.logprob_options.require_token_ids = True
    response = await model.arun(request)
    logprobs = response.choices[0].logprobs
    assert len(logprobs.token_ids) == len(logprobs.token_logprobs) == 5
    assert logprobs.basis == logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
    # A token that ends inside a UTF-8 character has no entry in llama-server's answer: NaN in its place, flagged.
    missing = [i for i, v in enumerate(logprobs.token_logprobs) if v != v]
    assert list(logprobs.top_counts) == [0 if i in missing else 3 for i in range(5)]
    assert bool(missing) == any(e.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS for e in response.errors)
    # The text is the bytes of the sampled tokens (control tokens have none); a cut UTF-8 token keeps its bytes.
    assert logprobs.token_bytes.decode("utf-8", "replace") == _text(response)


async def test_post_sampling_probs_are_reported_as_post_sampling_logs(model):
    request = build_request("tiny", prompt="Hello", max_output_tokens=3, seed=1, top_logprobs=2)
    request.logprob_options.basis = logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
    logprobs = (await model.arun(request)).choices[0].logprobs
    assert logprobs.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
    assert all(v <= 0 for v in logprobs.token_logprobs)


async def test_choice_constraint_gives_a_label(model):
    for seed in range(5):
        response = await model.arun(build_request("tiny", prompt="Answer:", choices=["yes", "no", "maybe"], seed=seed))
        assert _text(response) in {"yes", "no", "maybe"}
        assert response.choices[0].constrained_label == _text(response)


async def test_json_schema_constraint_gives_valid_json(model):
    schema = {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}
    response = await model.arun(
        build_request("tiny", prompt="JSON:", json_schema=orjson.dumps(schema).decode(), max_output_tokens=40, seed=3)
    )
    jsonschema.validate(orjson.loads(_text(response)), schema)


async def test_gbnf_grammar_constraint(model):
    request = build_request("tiny", prompt="x", seed=2)
    request.constraint.grammar.dialect = request_pb2.GRAMMAR_DIALECT_GBNF
    request.constraint.grammar.text = 'root ::= ("ab" | "cd") "!"'
    assert _text(await model.arun(request)) in {"ab!", "cd!"}


async def test_stop_sequence_ends_generation(model):
    response = await model.arun(
        build_request("tiny", prompt="Hello world, the", max_output_tokens=40, stop=["e"], seed=42)
    )
    choice = response.choices[0]
    assert "e" not in _text(response)
    if choice.finish_reason == response_pb2.FINISH_REASON_STOP_SEQUENCE:
        assert choice.stop_sequence == "e"


async def test_stream_accumulates_to_the_unary_answer(model):
    request = build_request("tiny", prompt="Hello world", max_output_tokens=8, temperature=0, top_logprobs=2)
    unary = await model.arun(request)
    streamed = accumulate([e async for e in model.astream(request)])
    assert _text(streamed) == _text(unary)
    logprobs = unary.choices[0].logprobs
    # The stream has no event for a token that ends inside a UTF-8 sequence; the unary answer keeps its position
    # (NaN, flagged). The positions that have a logprob agree, and where the stream lost ids it says so.
    scored = [i for i, v in zip(logprobs.token_ids, logprobs.token_logprobs, strict=True) if v == v]
    assert list(streamed.choices[0].logprobs.token_ids) == scored
    if len(scored) < len(logprobs.token_ids):
        assert any(w.code == "sampled_tokens_incomplete" for w in streamed.warnings)
    else:
        assert streamed.choices[0].sampled_tokens == unary.choices[0].sampled_tokens
    assert streamed.choices[0].finish_reason == unary.choices[0].finish_reason
    assert streamed.usage.output_token_count == unary.usage.output_token_count and streamed.model == unary.model


async def test_chat_with_a_system_message(model):
    request = build_request(
        "tiny", messages=[("system", "Be brief."), ("user", "Hi")], max_output_tokens=5, seed=1, top_logprobs=1
    )
    response = await model.arun(request)
    assert response.id.startswith("chatcmpl-") and response.usage.input_token_count > 0
    # Seed 1 samples a token that ends inside a UTF-8 character: llama-server's chat answer has no entry for it
    # (and no ids to align to), so modelir says how many of the generated tokens have logprobs.
    assert len(response.choices[0].logprobs.token_ids) == 4
    (error,) = response.errors
    assert error.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS and "4 of the 5 tokens" in error.message
    streamed = accumulate([e async for e in model.astream(request)])
    assert [e.message for e in streamed.errors] == [error.message]


async def test_tokenize_with_context_and_round_trip(model):
    alone = await model.atokenize(" ü")
    after = await model.atokenize(" ü", context="café")
    assert after.token_bytes.decode() == " ü" and list(alone.token_ids) == list(after.token_ids)
    straddling = await model.atokenize("llo", context="He")  # "Hello" is one token: it covers the context too
    assert straddling.straddles_context
    for text in ["Hello world, café ü 日本", "plain ascii"]:
        assert await model.around_trip(text)


async def test_classify_uses_the_choice_and_post_sampling_logprobs(model):
    result = await aclassify(model, "Question: yes or no? Answer:", ["yes", "no"])
    assert result.method == "choice_logprobs"
    assert result.label in {"yes", "no"} and sum(result.probabilities.values()) == pytest.approx(1.0)


async def test_rejections_before_any_request(model):
    scoring = build_request("tiny", prompt="The cat sat on", max_output_tokens=1)
    scoring.input_scoring.continuations.add(text=" the mat")
    with pytest.raises(UnsupportedCapabilityError, match="INPUT_SCORING"):
        await model.arun(scoring)  # never answered with output-only logprobs
    fim = build_request("tiny", prompt="a")
    fim.fim.suffix = "b"
    fim.constraint.regex = "a+"
    with pytest.raises(UnsupportedCapabilityError, match="FIM, CONSTRAINT_REGEX"):
        await model.arun(fim)


async def test_a_prompt_longer_than_the_context_is_a_typed_error(model):
    with pytest.raises(errors.ProviderRejectedError, match="context"):
        await model.arun(build_request("tiny", prompt="word " * 400, max_output_tokens=1))


def _eos_id(server: str) -> int:
    import httpx

    answer = httpx.post(server + "/tokenize", json={"content": "</s>", "parse_special": True, "add_special": False})
    (token,) = answer.json()["tokens"]
    return token


async def test_sampled_token_ids_without_logprobs_agree_unary_and_streamed(model):
    request = build_request("tiny", prompt="Hello world, the tiny llama", max_output_tokens=6, seed=42)
    unary = await model.arun(request)
    streamed = accumulate([e async for e in model.astream(request)])
    tokens = unary.choices[0].sampled_tokens
    assert len(tokens.token_ids) == unary.usage.output_token_count == 6
    assert list(tokens.part_indexes) == [0] * 6  # one text part, no trimmed token (the limit ended it)
    assert streamed.choices[0].sampled_tokens == tokens
    detokenized = await model.adetokenize(list(tokens.token_ids))
    assert detokenized == _text(unary)


async def test_logit_bias_forces_the_eos_which_belongs_to_no_part(model, server):
    eos = _eos_id(server)
    request = build_request("tiny", prompt="Hello world, the tiny llama", max_output_tokens=8, seed=1)
    request.sampling.logit_bias[eos] = 100.0
    unary = await model.arun(request)
    choice = unary.choices[0]
    assert choice.finish_reason == response_pb2.FINISH_REASON_STOP and _text(unary) == ""
    # The EOS id is reported (return_tokens) though its text is trimmed: it belongs to no part.
    assert list(choice.sampled_tokens.token_ids) == [eos] and not choice.sampled_tokens.part_indexes
    streamed = accumulate([e async for e in model.astream(request)])
    assert streamed.choices[0].sampled_tokens == choice.sampled_tokens
    assert streamed.choices[0].message == choice.message  # one empty text part in both


async def test_a_negative_logit_bias_removes_the_sampled_token(model):
    request = build_request("tiny", prompt="Hello world, the tiny llama", max_output_tokens=1, temperature=0)
    first = (await model.arun(request)).choices[0].sampled_tokens.token_ids[0]
    request.sampling.logit_bias[first] = -100.0
    assert (await model.arun(request)).choices[0].sampled_tokens.token_ids[0] != first


async def test_chat_takes_the_logit_bias_too(model, server):
    chat = build_request("tiny", messages=[("user", "Hi")], max_output_tokens=8, seed=1)
    chat.sampling.logit_bias[_eos_id(server)] = 100.0  # the OpenAI object form, which the chat endpoint takes
    response = await model.arun(chat)
    assert _text(response) == "" and response.usage.output_token_count == 1


async def test_json_object_constraint_gives_a_json_object(model):
    request = build_request("tiny", prompt="JSON:", max_output_tokens=60, seed=3)
    request.constraint.json_object.SetInParent()
    text = _text(await model.arun(request))
    assert text.startswith("{")


def test_tokenizer_facts_give_the_vocabulary_size(server):
    import httpx
    from modelir.transports.base import HttpResponse

    transport = LlamaCpp()
    (native,) = transport.lower_tokenizer_info("tiny")
    answer = httpx.request(native.method, server + native.path)
    info = transport.lift_tokenizer_info([HttpResponse(answer.status_code, dict(answer.headers), answer.content)])
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_model", ROOT / "engines/llamacpp/tiny_model.py")
    assert spec is not None and spec.loader is not None
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    assert info.vocabulary_size == len(tiny.build_vocabulary()[0])  # bytes, merged pieces and controls
    assert _eos_id(server) < info.vocabulary_size


async def test_detokenizing_an_id_outside_the_vocabulary_is_a_request_error(server, model):
    """llama-server answers an id outside its vocabulary with a 500 (its C++ range check, which the transport's
    error mapping reads as a rejection); modelir refuses it first, against `/v1/models`' `n_vocab`."""
    import httpx

    async with httpx.AsyncClient() as client:
        answer = await client.post(server + "/detokenize", json={"tokens": [99999]})
    assert answer.status_code == 500 and "(which is 99999) >= this->size() (which is 356)" in answer.text
    with pytest.raises(errors.InvalidRequestError) as refused:
        await model.adetokenize([10, 99999])
    assert [(v.field, v.description) for v in refused.value.violations] == [
        ("token_ids[1]", "Token id 99999 is outside the model's vocabulary of 356 tokens (ids 0 to 355).")
    ]
    assert await model.adetokenize([355]) == "<|im_end|>"  # the last id is in


async def test_logprob_entries_left_out_mid_utf8_are_aligned_to_the_sampled_ids(model):
    flagged = 0
    for seed in range(1, 16):
        request = build_request(
            "tiny", prompt="Hello world, café ü 日本", max_output_tokens=12, seed=seed, top_logprobs=1
        )
        response = await model.arun(request)
        choice = response.choices[0]
        # One logprob position per sampled token, with the same id, whatever llama-server left out.
        assert list(choice.logprobs.token_ids) == list(choice.sampled_tokens.token_ids)
        if any(e.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS for e in response.errors):
            flagged += 1
            assert any(v != v for v in choice.logprobs.token_logprobs)  # the missing positions are NaN
            streamed = accumulate([e async for e in model.astream(request)])
            # The stream has no event for such a token at all: its ids are short, and it says so.
            assert any(w.code == "sampled_tokens_incomplete" for w in streamed.warnings)
    assert flagged  # the prompt's multi-byte characters make the tiny model split some


@pytest.mark.parametrize("kind", ["json_schema", "json_object"])
async def test_json_cut_by_the_token_limit_is_flagged_on_raw_prompts_and_chat(model, kind):
    schema = orjson.dumps({"type": "object", "properties": {"answer": {"type": "string"}}}).decode()
    for request in (
        build_request("tiny", prompt="JSON:", max_output_tokens=3, seed=3),
        build_request("tiny", messages=[("user", "JSON please")], max_output_tokens=3, seed=3),
    ):
        if kind == "json_schema":
            request.constraint.json_schema.schema_json = schema
        else:
            request.constraint.json_object.SetInParent()
        response = await model.arun(request)
        assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_LENGTH
        assert [e.reason for e in response.errors] == [errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED]


def _first_seed(server: str, native: dict, found) -> int:
    """The first seed whose native answer shows the case a test needs (asked of the engine directly: the search is
    not part of what the test proves, nor of its recordings)."""
    import httpx

    for seed in range(1, 200):
        body = {**native, "seed": seed, "return_tokens": True, "cache_prompt": False}
        if found(httpx.post(server + "/completion", json=body, timeout=30).json()):
            return seed
    raise AssertionError(f"no seed in 1-199 gives the case for {native}")


def _warned(response: response_pb2.Response, code: str) -> bool:
    return any(w.code == code for w in response.warnings)


async def _both(model, request: request_pb2.Request) -> tuple[response_pb2.Response, response_pb2.Response]:
    """The unary answer and the folded stream of one request, prompt cache off (so usage counters agree)."""
    request.provider_options.add(transport="llamacpp", options_json='{"cache_prompt": false}')
    return await model.arun(request), accumulate([e async for e in model.astream(request)])


@pytest.mark.parametrize(
    ("stop", "text", "dropped"),
    [
        # Seed 42 samples " fa", then " hell", whose "e" is the stop string: the text keeps " fa h".
        ("e", " fa h", [1]),
        # "a hel" spans both tokens (two tokens itself): " fa" is held back as a possible start of it, the stop
        # token's entry carries " f", and the unary answer drops both entries (and then leaves the key out).
        ("a hel", " f", [0, 1]),
    ],
)
async def test_a_stop_string_trims_logprobs_alike_unary_and_streamed(model, stop, text, dropped):
    # The unary answer drops as many trailing logprob entries as the stop string has tokens; the stream keeps them.
    request = build_request(
        "tiny", prompt="Hello world, the", max_output_tokens=40, stop=[stop], seed=42, top_logprobs=1
    )
    unary, streamed = await _both(model, request)
    for response in (unary, streamed):
        choice = response.choices[0]
        assert choice.finish_reason == response_pb2.FINISH_REASON_STOP_SEQUENCE and choice.stop_sequence == stop
        assert _text(response) == text
        assert list(choice.logprobs.token_ids) == list(choice.sampled_tokens.token_ids)
        # Each position's bytes are the text it added, so the bytes give the text in both modes.
        assert choice.logprobs.token_bytes.decode() == _text(response)
    assert unary.choices[0].sampled_tokens == streamed.choices[0].sampled_tokens
    assert unary.choices[0].logprobs.token_byte_offsets == streamed.choices[0].logprobs.token_byte_offsets
    unary_values, streamed_values = (
        unary.choices[0].logprobs.token_logprobs,
        streamed.choices[0].logprobs.token_logprobs,
    )
    assert [i for i, v in enumerate(unary_values) if v != v] == dropped  # flagged in place, not shifted
    (error,) = unary.errors
    assert error.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS and "stop string" in error.message
    assert all(v == v for v in streamed_values) and not streamed.errors  # the stream has every entry
    assert [v for i, v in enumerate(unary_values) if i not in dropped] == [
        v for i, v in enumerate(streamed_values) if i not in dropped
    ]


async def test_a_possible_start_of_a_stop_string_held_back_at_the_limit_is_flagged_in_the_stream(model):
    # " hell" could begin the stop string " hello", so llama-server holds its text back; the token limit then
    # ends generation. The unary answer has the text; the stream never carried it, and says so.
    request = build_request("tiny", prompt="Hello world, the", max_output_tokens=2, stop=[" hello"], seed=42)
    unary, streamed = await _both(model, request)
    assert _text(unary) == " fa hell" and _text(streamed) == " fa"
    assert unary.choices[0].sampled_tokens == streamed.choices[0].sampled_tokens
    assert _warned(streamed, "stream_text_incomplete") and not unary.warnings


async def test_a_final_token_ending_inside_a_utf8_character_is_flagged_in_the_stream(model, server):
    # The first seed whose last token leaves a character unfinished when the token limit ends generation:
    # llama-server holds the whole unfinished tail back in the stream, while the unary answer has it with U+FFFD for
    # the cut bytes (the server's own rendering, kept: that text is what the model produced).
    prompt = "Hello world, café ü 日本"
    seed = _first_seed(server, {"prompt": prompt, "n_predict": 8}, lambda a: a["content"].endswith("\ufffd"))
    request = build_request("tiny", prompt=prompt, max_output_tokens=8, seed=seed, top_logprobs=1)
    unary, streamed = await _both(model, request)
    assert unary.choices[0].finish_reason == streamed.choices[0].finish_reason == response_pb2.FINISH_REASON_LENGTH
    assert _text(unary).endswith("\ufffd") and _text(unary).startswith(_text(streamed))
    assert len(_text(streamed)) < len(_text(unary))
    assert _warned(streamed, "stream_text_incomplete") and _warned(streamed, "sampled_tokens_incomplete")
    assert not _warned(unary, "stream_text_incomplete")
    # The unary ids are complete; the stream's are a prefix of them (no event ever carried the last ones).
    unary_ids, streamed_ids = unary.choices[0].sampled_tokens.token_ids, streamed.choices[0].sampled_tokens.token_ids
    assert len(unary_ids) == 8 and list(unary_ids[: len(streamed_ids)]) == list(streamed_ids)
    assert list(streamed.choices[0].sampled_tokens.part_indexes) == [0] * len(streamed_ids)


async def test_chat_names_the_stop_string_like_the_raw_prompt(model):
    raw = await model.arun(build_request("tiny", prompt="Hello world, the", max_output_tokens=40, stop=["e"], seed=42))
    assert raw.choices[0].stop_sequence == "e"
    request = build_request("tiny", messages=[("user", "Hi")], max_output_tokens=30, stop=["e"], seed=42)
    unary, streamed = await _both(model, request)
    for response in (unary, streamed):
        choice = response.choices[0]
        assert choice.finish_reason == response_pb2.FINISH_REASON_STOP_SEQUENCE and choice.stop_sequence == "e"
        assert choice.raw_finish_reason == "stop"
    assert unary.choices == streamed.choices


async def test_chat_without_a_stop_string_ending_on_eos_is_a_natural_stop(model, server):
    request = build_request("tiny", messages=[("user", "Hi")], max_output_tokens=8, seed=1, stop=["zzz"])
    request.sampling.logit_bias[_eos_id(server)] = 100.0
    unary, streamed = await _both(model, request)
    for response in (unary, streamed):
        assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_STOP
        assert response.choices[0].WhichOneof("stop") is None


@pytest.mark.parametrize("forced", ["eos", "space", "newline"])
async def test_chat_unary_and_streamed_agree_on_forced_and_whitespace_only_output(model, server, forced):
    token = {"eos": _eos_id(server), "space": 32, "newline": 10}[forced]  # ids 0-255 are the bytes
    request = build_request("tiny", messages=[("user", "Hi")], max_output_tokens=4, seed=1, top_logprobs=1)
    request.sampling.logit_bias[token] = 100.0
    unary, streamed = await _both(model, request)
    assert _text(unary) == {"eos": "", "space": "    ", "newline": "\n\n\n\n"}[forced]
    assert unary.choices == streamed.choices and unary.usage == streamed.usage and unary.errors == streamed.errors


async def test_when_every_token_is_held_back_the_stream_says_so(model):
    # Id 230 is the byte 0xE6, which starts a three-byte character: three of them never finish one, so llama-server
    # sends no token event at all, only the final one.
    request = build_request("tiny", prompt="Hello", max_output_tokens=3, seed=1)
    request.sampling.logit_bias[230] = 100.0
    unary, streamed = await _both(model, request)
    assert list(unary.choices[0].sampled_tokens.token_ids) == [230] * 3 and _text(unary) == "\ufffd" * 3
    assert not streamed.choices[0].sampled_tokens.token_ids and _text(streamed) == ""
    assert _warned(streamed, "stream_text_incomplete") and _warned(streamed, "sampled_tokens_incomplete")


async def test_an_end_token_after_an_unfinished_character_is_not_taken_for_the_last_streamed_token(model, server):
    # The first seed that samples a text token, then 0xE6 (230) and the EOS: neither of the last two has a stream
    # event, so the last streamed id is text, not the EOS that ended the answer.
    eos = _eos_id(server)
    native = {"prompt": "Hello", "n_predict": 6, "logit_bias": [[230, 10.0], [eos, 12.0]]}
    seed = _first_seed(server, native, lambda a: len(a["tokens"]) == 3 and a["tokens"][0] not in (230, eos))
    request = build_request("tiny", prompt="Hello", max_output_tokens=6, seed=seed)
    request.sampling.logit_bias[230] = 10.0
    request.sampling.logit_bias[eos] = 12.0
    unary, streamed = await _both(model, request)
    tokens = unary.choices[0].sampled_tokens
    assert list(tokens.token_ids[1:]) == [230, eos] and list(tokens.part_indexes) == [0, 0, -1]
    assert unary.choices[0].finish_reason == streamed.choices[0].finish_reason == response_pb2.FINISH_REASON_STOP
    streamed_tokens = streamed.choices[0].sampled_tokens
    assert list(streamed_tokens.token_ids) == list(tokens.token_ids[:1]) and list(streamed_tokens.part_indexes) == [0]
    assert _text(unary).startswith(_text(streamed)) and _text(unary).endswith("\ufffd")
    assert _warned(streamed, "stream_text_incomplete") and _warned(streamed, "sampled_tokens_incomplete")


async def test_classify_answers_labels_that_share_a_prefix_every_time(model):
    """ "negative" and "neutral" share their first bytes: when the sample takes "positive", their unsampled branch
    is classified by a call of its own (before, classify refused here: "the alternative 'n', not sampled, begins
    several labels"); the seed makes every call answer the same."""
    labels = ["positive", "negative", "neutral"]
    first = await aclassify(model, "Review: fine. Sentiment:", labels)
    assert first.method == "choice_logprobs" and set(first.probabilities) == set(labels)
    assert all(p > 0 for p in first.probabilities.values()) and sum(first.probabilities.values()) == pytest.approx(1)
    for _ in range(2):  # the same answer; the values within the engine's float noise (its prompt cache)
        again = await aclassify(model, "Review: fine. Sentiment:", labels)
        assert again.label == first.label and again.probabilities == pytest.approx(first.probabilities, abs=1e-5)


# ---- one truth: the numpy forward pass (`numpy_truth.py`) --------------------------------------------------

TRUTH_TEXTS = ["The cat sat on the mat. Le café", "Hello world, café ü 日本 🙂 it's 123", "naïve façade — Ünïcödé ✓"]
TRUTH_TOLERANCE = 1e-3  # llama.cpp computes in float32 with its own kernels; the truth is float64
LARGEST = [0.0]


def _close(got: float, want: float) -> None:
    LARGEST[0] = max(LARGEST[0], abs(got - want))
    assert got == pytest.approx(want, abs=TRUTH_TOLERANCE)


@pytest.mark.parametrize("text", TRUTH_TEXTS)
async def test_tokenize_is_the_models_own_tokenization(model, text):
    answer = await model.atokenize(text, add_special_tokens=True)
    assert list(answer.token_ids) == numpy_truth.tokenize(text)
    assert answer.token_bytes.endswith(text.encode())


@pytest.mark.parametrize("text", TRUTH_TEXTS)
async def test_sampled_and_top_logprobs_equal_the_truth_and_the_raw_answer(model, text):
    """Greedy, pre-sampling logprobs: each sampled token's and each alternative's logprob is the truth's, and
    modelir's columns are the raw answer's entries exactly (a token llama-server gave no entry, one that ends inside
    a UTF-8 character, is NaN in place and flagged)."""
    request = build_request("tiny", prompt=text, max_output_tokens=8, temperature=0, top_logprobs=3)
    request.include_raw = True
    out = await model.arun(request)
    raw = orjson.loads(out.raw.body)
    choice, ids = out.choices[0], raw["tokens"]
    logprobs = choice.logprobs
    assert list(choice.sampled_tokens.token_ids) == ids == list(logprobs.token_ids)
    entries = raw["completion_probabilities"]
    present = [i for i, v in enumerate(logprobs.token_logprobs) if v == v]
    assert [logprobs.token_logprobs[i] for i in present] == [float(np.float32(e["logprob"])) for e in entries]
    assert (len(present) < len(ids)) == any(e.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS for e in out.errors)
    prompt = numpy_truth.tokenize(text)
    rows = numpy_truth.logprobs(prompt + ids)
    offset = 0
    for i, count in enumerate(logprobs.top_counts):
        row = rows[len(prompt) + i - 1]
        if i in present:
            _close(logprobs.token_logprobs[i], row[ids[i]])
            assert row.max() - row[ids[i]] < TRUTH_TOLERANCE  # greedy: the truth's most likely token
        for at in range(offset, offset + count):
            _close(logprobs.top_logprobs[at], row[logprobs.top_token_ids[at]])
        offset += count


def test_largest_difference_from_the_truth():
    """Runs after the comparisons above: prints the largest difference they saw."""
    if not LARGEST[0]:
        pytest.skip("reports on the comparisons of the tests above; run the whole module")
    print(f"\nllama-server live: largest |llama-server - numpy truth| = {LARGEST[0]:.3g}")
    assert LARGEST[0] < TRUTH_TOLERANCE
