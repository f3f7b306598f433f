"""The reference model fills the v1 fields an engine fills: sampled tokens with their parts and trimmed stops,
logit bias, a minimum output length, multi-turn token-in, the prompt token ids it continued, tokenizing a
conversation, tokenizer facts, several continuations (also after a conversation), span counts, the constrained label,
a JSON-object constraint and each choice's output token count."""

from __future__ import annotations

import orjson
import pytest
from modelir import Model, ReferenceModel, build_request
from modelir.transports.reference import logprob_table
from modelir.transports.reference.vocabulary import BOS, EOS, VOCAB
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2, response_pb2, service_pb2

C = capabilities_pb2


@pytest.fixture
def reference() -> Model:
    return Model(ReferenceModel(), name="reference")


def _answer_bytes(choice: response_pb2.Choice, kind: str) -> bytes:
    """The bytes of the sampled tokens attributed to the first part of `kind`."""
    (index,) = [i for i, p in enumerate(choice.message.parts) if p.WhichOneof("content") == kind][:1]
    tokens = choice.sampled_tokens
    return bytes(t for t, i in zip(tokens.token_ids, tokens.part_indexes, strict=True) if i == index and t < 256)


def test_the_manifest_claims_the_v1_features():
    claimed = set(ReferenceModel().manifest().capabilities)
    for capability in (
        C.CAPABILITY_CONSTRAINT_JSON_OBJECT,
        C.CAPABILITY_LOGIT_BIAS,
        C.CAPABILITY_MIN_OUTPUT_TOKENS,
        C.CAPABILITY_MULTI_TURN_TOKEN_INPUT,
        C.CAPABILITY_TOKENIZE_CONVERSATION,
    ):
        assert capability in claimed, C.Capability.Name(capability)


async def test_sampled_tokens_say_which_part_each_belongs_to(reference):
    request = build_request("reference", messages=[("user", "think, then call get_weather")], seed=3)
    request.tools.add(function=request_pb2.FunctionTool(name="get_weather", parameters_json_schema='{"type":"object"}'))
    request.reasoning_controls.effort = request_pb2.REASONING_EFFORT_LOW
    request.reasoning_controls.include_thoughts = True
    request.logprob_options.SetInParent()
    choice = (await reference.arun(request)).choices[0]
    reasoning, call = choice.message.parts
    tokens = choice.sampled_tokens
    assert len(tokens.token_ids) == len(tokens.part_indexes) == choice.output_token_count > 0
    assert set(tokens.part_indexes) == {0, 1}
    assert _answer_bytes(choice, "reasoning") == b"<think>" + reasoning.reasoning.text.encode() + b"</think>"
    assert _answer_bytes(choice, "tool_call").decode() == call.tool_call.arguments_json
    # The logprobs' token ids are the first entries of the sampled tokens (here: all of them).
    assert list(choice.logprobs.token_ids) == list(tokens.token_ids)[: len(choice.logprobs.token_ids)]


async def test_a_trimmed_end_of_sequence_stop_token_or_stop_string_is_a_sampled_token_of_no_part(reference):
    ending = build_request("reference", prompt="The end", max_output_tokens=400, seed=1)
    ending.sampling.logit_bias[EOS] = 9.0  # the table rarely ends a text: make EOS likely
    eos = (await reference.arun(ending)).choices[0]
    assert eos.finish_reason == response_pb2.FINISH_REASON_STOP
    assert eos.sampled_tokens.token_ids[-1] == EOS and eos.sampled_tokens.part_indexes[-1] == -1
    assert _answer_bytes(eos, "text").decode() == eos.message.parts[0].text

    by_id = build_request("reference", prompt="x", max_output_tokens=300, seed=5, stop_token_ids=[ord("q")])
    stopped = (await reference.arun(by_id)).choices[0]
    assert stopped.stop_token_id == ord("q") and stopped.sampled_tokens.token_ids[-1] == ord("q")
    assert stopped.sampled_tokens.part_indexes[-1] == -1 and "q" not in stopped.message.parts[0].text

    by_string = build_request("reference", prompt="x", stop=["e"], max_output_tokens=200, seed=4, logprobs=True)
    cut = (await reference.arun(by_string)).choices[0]
    assert cut.stop_sequence == "e" and "e" not in cut.message.parts[0].text
    assert cut.sampled_tokens.token_ids[-1] == ord("e") and cut.sampled_tokens.part_indexes[-1] == -1
    assert len(cut.logprobs.token_ids) == len(cut.sampled_tokens.token_ids) - 1  # the trimmed token comes last


async def test_output_token_count_per_choice_sums_to_usage(reference):
    response = await reference.arun(build_request("reference", prompt="x", n=3, max_output_tokens=20, seed=2))
    counts = [c.output_token_count for c in response.choices]
    assert all(counts) and sum(counts) == response.usage.output_token_count


async def test_logit_bias_moves_sampling(reference):
    plain = build_request("reference", prompt="x", max_output_tokens=60, seed=6)
    biased = build_request("reference", prompt="x", max_output_tokens=60, seed=6)
    biased.sampling.logit_bias[ord("z")] = 8.0
    text = (await reference.arun(plain)).choices[0].message.parts[0].text
    pushed = (await reference.arun(biased)).choices[0]
    assert pushed.message.parts[0].text.count("z") > text.count("z") + 10
    # Logprobs stay the model's own (the bias changes what is drawn, not the reported distribution).
    biased.logprob_options.SetInParent()
    logprobs = (await reference.arun(biased)).choices[0].logprobs
    first = logprobs.token_ids[0]
    assert logprobs.token_logprobs[0] == pytest.approx(logprob_table()[ord("x"), first])
    banned = build_request("reference", prompt="x", max_output_tokens=60, seed=6)
    banned.sampling.logit_bias[ord(" ")] = -1000.0
    assert " " not in (await reference.arun(banned)).choices[0].message.parts[0].text


async def test_min_output_tokens_holds_back_eos_and_stop_ids(reference):
    free = build_request("reference", prompt="x.", max_output_tokens=60, seed=8, stop_token_ids=[ord("e")])
    early = (await reference.arun(free)).choices[0]
    assert early.output_token_count < 30, "the unconstrained sample must stop early for this test to mean anything"
    free.sampling.min_output_tokens = 30
    held = (await reference.arun(free)).choices[0]
    assert held.output_token_count >= 30
    kept = list(held.sampled_tokens.token_ids)
    assert EOS not in kept[:29] and ord("e") not in kept[:29]


async def test_an_assistant_turn_with_token_ids_renders_as_those_ids(reference):
    def conversation(token_ids: list[int]) -> service_pb2.TokenizeRequest:
        request = service_pb2.TokenizeRequest(model="reference", add_generation_prompt=True)
        turns = ((content_pb2.ROLE_USER, "hi"), (content_pb2.ROLE_ASSISTANT, "ho"), (content_pb2.ROLE_USER, "x"))
        for role, text in turns:
            request.conversation.messages.add(role=role).parts.add(text=text)
        request.conversation.messages[1].token_ids.extend(token_ids)
        return request

    as_text = await reference.atokenize_request(conversation([]))
    as_ids = await reference.atokenize_request(conversation([104, 111, EOS]))
    assert bytes(as_text.token_ids).decode() == "<|user|>\nhi\n<|assistant|>\nho\n<|user|>\nx\n<|assistant|>\n"
    # The turn's text "ho" becomes the ids given, EOS included; everything around it is the same.
    text_ids = list(as_text.token_ids)
    at = text_ids.index(ord("h"), len("<|user|>\nhi\n<|assistant|>\n") - 1)
    assert list(as_ids.token_ids) == [*text_ids[:at], 104, 111, EOS, *text_ids[at + 2 :]]
    # Generation continues the same context.
    request = build_request("reference", messages=[("user", "hi"), ("assistant", "ho"), ("user", "x")])
    request.conversation.messages[1].token_ids.extend([104, 111, EOS])
    response = await reference.arun(request)
    assert response.usage.input_token_count == len(as_ids.token_ids) + 1  # and BOS
    # ... and says so: the prompt the engine saw, the turn's ids in it verbatim (what a trajectory is read from).
    assert list(response.prompt_token_ids) == [BOS, *as_ids.token_ids]


async def test_every_answer_reports_the_prompt_token_ids_it_continued(reference):
    by_ids = await reference.arun(build_request("reference", token_ids=[104, 105], max_output_tokens=2))
    assert list(by_ids.prompt_token_ids) == [104, 105]
    by_text = await reference.arun(build_request("reference", prompt="hi", max_output_tokens=2))
    assert list(by_text.prompt_token_ids) == [BOS, 104, 105]


async def test_token_ids_outside_the_vocabulary_are_rejected_up_front(reference):
    request = build_request("reference", messages=[("user", "hi"), ("assistant", "ho")])
    request.conversation.messages[1].token_ids.extend([104, VOCAB + 5])
    problems = await reference.avalidate(request)
    assert any(str(VOCAB + 5) in reason for reason in problems.unsupported.reasons)


async def test_tokenize_a_conversation_with_and_without_the_generation_prompt(reference):
    request = service_pb2.TokenizeRequest(model="reference")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="Hi")
    without = await reference.atokenize_request(request)
    request.add_generation_prompt = True
    request.add_special_tokens = True
    with_prompt = await reference.atokenize_request(request)
    assert without.token_bytes == b"<|user|>\nHi\n"
    assert list(with_prompt.token_ids) == [BOS, *without.token_ids, *b"<|assistant|>\n"]
    assert with_prompt.tokens[0] == "<s>"


def test_tokenizer_facts():
    info = ReferenceModel().tokenizer_info()
    assert (info.vocabulary_size, info.bos_token_id, list(info.eos_token_ids)) == (VOCAB, BOS, [EOS])


async def test_several_continuations_are_scored_against_one_context_in_order(reference):
    labels = ["yes", "no", "peut-être"]
    many = build_request("reference", prompt="Answer: ", max_output_tokens=0)
    for label in labels:
        many.input_scoring.continuations.add(text=label)
    scores = (await reference.arun(many)).input_scores
    assert len(scores) == 3
    for label, score in zip(labels, scores, strict=True):
        one = build_request("reference", prompt="Answer: ", max_output_tokens=0)
        one.input_scoring.continuations.add(text=label)
        (alone,) = (await reference.arun(one)).input_scores
        assert score == alone
        assert score.span_byte_count == score.scored_byte_count == len(label.encode())
        assert score.span_char_count == score.scored_char_count == len(label)
        assert not score.first_token_straddles_context
    assert scores[2].span_byte_count == 10 and scores[2].span_char_count == 9


async def test_a_continuation_after_a_conversation_sits_after_the_generation_prompt(reference):
    request = build_request("reference", messages=[("user", "Is it?")], max_output_tokens=0)
    request.input_scoring.continuations.add(text="yes")
    (score,) = (await reference.arun(request)).input_scores
    rendered = b"<|user|>\nIs it?\n<|assistant|>\n"
    assert score.span_start_byte == len(rendered)  # BOS has no bytes
    table = logprob_table()
    ids = [*rendered, *b"yes"]
    expected = sum(table[ids[i - 1], ids[i]] for i in range(len(rendered), len(ids)))
    assert score.logprob_sum == pytest.approx(expected)


async def test_the_whole_prompt_span_counts_the_unscored_first_token(reference):
    request = build_request("reference", prompt="héllo", max_output_tokens=0)
    request.input_scoring.SetInParent()
    (score,) = (await reference.arun(request)).input_scores
    assert score.unscored_token_count == 1  # BOS, which has no bytes
    assert (score.span_byte_count, score.span_char_count) == (6, 5)
    assert (score.scored_byte_count, score.scored_char_count) == (6, 5)


async def test_the_constrained_label_is_its_own_field(reference):
    request = build_request("reference", messages=[("user", "ok?")], choices=["yes", "no", "peut-être"], n=4)
    response = await reference.arun(request)
    for choice in response.choices:
        assert choice.constrained_label in ("yes", "no", "peut-être")
        assert choice.message.parts[0].text == choice.constrained_label


async def test_a_json_object_constraint_gives_a_json_object(reference):
    request = build_request("reference", messages=[("user", "j")], max_output_tokens=120, n=3)
    request.constraint.json_object.SetInParent()
    response = await reference.arun(request)
    assert not response.errors
    for choice in response.choices:
        assert isinstance(orjson.loads(choice.message.parts[0].text), dict)


async def test_tokenize_messages_sugar(reference):
    tokens = await reference.atokenize_messages([("user", "Hi")])
    assert tokens.token_bytes == b"<|user|>\nHi\n<|assistant|>\n"
    bare = reference.tokenize_messages([("user", "Hi")], add_generation_prompt=False)
    assert bare.token_bytes == b"<|user|>\nHi\n"
