"""The classification helper and tokenize-with-context / round trips on the reference model."""

from __future__ import annotations

import pytest
from modelir import Model, UnsupportedCapabilityError, aclassify
from modelir.pipeline.capabilities import narrow
from modelir.v1 import capabilities_pb2

C = capabilities_pb2.Capability
MESSAGES = [("user", "Is it raining?")]


async def test_classify_with_a_choice_and_top_k_logprobs(reference):
    result = await aclassify(reference, MESSAGES, ["maybe", "no", "keep"])
    # The reference model's alternatives are its unconstrained table (pre-sampling), so the method says so.
    assert result.method == "top_logprobs"
    assert 0 < result.coverage < 1
    assert set(result.probabilities) == {"maybe", "no", "keep"}
    assert sum(result.probabilities.values()) == pytest.approx(1.0)
    assert result.label in result.probabilities


async def test_classify_falls_back_to_scoring_each_label(reference):
    scoring_only = Model(
        reference.transport, name="reference", manifest=narrow(reference.capabilities, [C.CAPABILITY_CONSTRAINT_CHOICE])
    )
    result = await aclassify(scoring_only, MESSAGES, ["yes", "no"])
    assert result.method == "scoring"
    assert result.label == max(result.probabilities, key=result.probabilities.get)
    assert sum(result.probabilities.values()) == pytest.approx(1.0)
    # Labels sharing a first token cannot be told apart by first-token logprobs: scoring takes over.
    shared = await aclassify(reference, MESSAGES, ["no", "none"])
    assert shared.method == "scoring"


async def test_classify_names_what_is_missing(reference):
    bare = Model(
        reference.transport,
        manifest=narrow(reference.capabilities, [C.CAPABILITY_CONSTRAINT_CHOICE, C.CAPABILITY_INPUT_SCORING]),
    )
    with pytest.raises(UnsupportedCapabilityError, match="CONSTRAINT_CHOICE, INPUT_SCORING"):
        await aclassify(bare, MESSAGES, ["a", "b"])


@pytest.mark.parametrize("text", ["hello", "héllo wörld ☃", "日本", ""])
async def test_round_trip(reference, text):
    assert await reference.around_trip(text)


async def test_tokenize_with_context_covers_only_the_text(reference):
    alone = await reference.atokenize("ü", context="")
    after = await reference.atokenize("ü", context="gr")
    assert list(alone.token_ids) == list(after.token_ids) == list("ü".encode())
    assert after.token_bytes.decode() == "ü"


async def test_classify_a_raw_prompt(reference):
    result = await aclassify(reference, "Is it raining? Answer:", ["yes", "no"])
    assert result.label in {"yes", "no"} and result.method in {"top_logprobs", "scoring"}
