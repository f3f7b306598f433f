"""The trajectory of a multi-turn rollout (`reading/trajectory`): the conformance vectors every SDK reads
(`conformance/trajectories`), proved to be the reference model's own answers, and each refusal of the rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from modelir import ReferenceModel
from modelir.reading.trajectory import (
    TrajectoryDriftError,
    TrajectoryError,
    trajectory,
    trajectory_from_records,
)
from modelir.records import read_records
from modelir.v1 import record_pb2, response_pb2

VECTORS = Path(__file__).resolve().parent.parent / "conformance" / "trajectories"
MANIFEST = json.loads((VECTORS / "expected.json").read_text())


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda entry: entry["path"])
def test_each_vector_reads_as_its_manifest_says(entry):
    path = VECTORS / entry["path"]
    if "error" in entry:
        with pytest.raises(TrajectoryDriftError) as refused:
            trajectory_from_records(path)
        got = refused.value
        assert {"turn": got.turn, "position": got.position, "expected": got.expected, "found": got.found} == entry[
            "error"
        ]
        return
    want = entry["trajectory"]
    got = trajectory_from_records(path)
    assert got.tokens.dtype == np.int32 and got.loss_mask.dtype == np.bool_ and got.logprobs.dtype == np.float32
    assert got.tokens.tolist() == want["tokens"]
    assert got.loss_mask.astype(int).tolist() == want["loss_mask"]
    assert [None if math.isnan(x) else x for x in got.logprobs.tolist()] == [
        None if x is None else float(np.float32(x)) for x in want["logprobs"]
    ]
    assert got.boundaries.tolist() == [[t["prompt_start"], t["sampled_start"], t["end"]] for t in want["turns"]]


def test_the_vectors_are_what_the_reference_model_answers():
    """Each record's request, run again on the reference model, gives the record's response: the files are the
    model's own rollout (with token input, or the naive one), not edited data."""
    model = ReferenceModel()
    for entry in MANIFEST["files"]:
        for record in read_records(VECTORS / entry["path"]):
            assert model.generate(record.request) == record.response, (entry["path"], record.key)
    token_input = next(read_records(VECTORS / "rollout.jsonl"))
    assert not token_input.request.conversation.messages[-1].token_ids  # turn 0: nothing to give back yet
    later = list(read_records(VECTORS / "rollout.jsonl"))[3].request.conversation.messages
    assert sum(bool(m.token_ids) for m in later) == 3  # every earlier assistant turn went back as its ids


def test_the_token_input_rollout_has_four_turns_with_tool_calls_and_users_between():
    records = list(read_records(VECTORS / "rollout.binpb"))
    got = trajectory(r.response for r in records)
    assert got.turn_count == 4 and len(got) == got.boundaries[-1, 2]
    calls = [any(p.HasField("tool_call") for p in r.response.choices[0].message.parts) for r in records]
    assert calls == [True, False, True, False]
    for (prompt_start, sampled_start, end), record in zip(got.boundaries.tolist(), records, strict=True):
        assert got.tokens[:sampled_start].tolist() == list(record.response.prompt_token_ids)
        assert got.tokens[sampled_start:end].tolist() == list(record.response.choices[0].sampled_tokens.token_ids)
        assert not got.loss_mask[prompt_start:sampled_start].any() and got.loss_mask[sampled_start:end].all()
        assert np.isnan(got.logprobs[prompt_start:sampled_start]).all()
    assert repr(got) == f"<Trajectory {len(got)} tokens, 4 turns, {int(got.loss_mask.sum())} sampled>"


def _turn(prompt: list[int], sampled: list[int], logprobs: list[float] | None = None) -> response_pb2.Response:
    response = response_pb2.Response(prompt_token_ids=prompt)
    choice = response.choices.add()
    choice.sampled_tokens.token_ids.extend(sampled)
    if logprobs is not None:
        choice.logprobs.token_ids.extend(sampled[: len(logprobs)])
        choice.logprobs.token_logprobs.extend(logprobs)
    return response


def test_a_rollout_that_extends_gives_the_sequence_mask_logprobs_and_boundaries():
    got = trajectory([_turn([1, 2], [3, 4], [-0.5]), _turn([1, 2, 3, 4, 5], [6])])
    assert got.tokens.tolist() == [1, 2, 3, 4, 5, 6]
    assert got.loss_mask.tolist() == [False, False, True, True, False, True]
    assert np.isnan(got.logprobs[[0, 1, 3, 4, 5]]).all() and got.logprobs[2] == np.float32(-0.5)
    assert got.boundaries.tolist() == [[0, 2, 4], [4, 5, 6]]


def test_a_prompt_that_changes_an_earlier_token_is_refused_naming_the_turn_and_position():
    with pytest.raises(TrajectoryDriftError) as refused:
        trajectory([_turn([1, 2], [3, 4]), _turn([1, 2, 3, 4, 5], [6]), _turn([1, 2, 3, 9, 5, 6, 7], [8])])
    drift = refused.value
    assert (drift.turn, drift.position, drift.expected, drift.found) == (2, 3, 4, 9)
    assert str(drift).startswith("turn 2: its prompt does not extend the earlier turns")


def test_a_prompt_shorter_than_the_sequence_is_refused_where_it_ends():
    with pytest.raises(TrajectoryDriftError) as refused:
        trajectory([_turn([1, 2], [3, 4]), _turn([1, 2, 3], [6])])
    assert (refused.value.turn, refused.value.position, refused.value.expected, refused.value.found) == (1, 3, 4, -1)
    assert "ends there" in str(refused.value)


@pytest.mark.parametrize(
    ("response", "says"),
    [
        (response_pb2.Response(prompt_token_ids=[1]), "no choice"),
        (_turn([], [3]), "prompt_token_ids"),
        (_turn([1], []), "no sampled token ids"),
        (_turn([1, 2], [3, 4], [-0.1, -0.2, -0.3]), "3 logprobs for 2 sampled tokens"),
    ],
)
def test_a_turn_the_rule_cannot_read_is_refused_naming_it(response, says):
    with pytest.raises(TrajectoryError, match=f"^turn 1: .*{says}"):
        trajectory([_turn([1], [2]), response])


def test_logprobs_of_other_tokens_are_refused():
    response = _turn([1], [3, 4], [-0.1])
    response.choices[0].logprobs.token_ids[0] = 9
    with pytest.raises(TrajectoryError, match="not the first of its sampled token ids"):
        trajectory([response])


def test_a_record_without_a_response_is_refused_naming_its_key(tmp_path):
    records = [
        record_pb2.Record(key="turn-0", response=_turn([1], [2])),
        record_pb2.Record(key="turn-1", status=record_pb2.RECORD_STATUS_FAILED),
    ]
    with pytest.raises(TrajectoryError, match=r"^turn 1: record 'turn-1' is of a call that returned no response"):
        trajectory_from_records(records)
    embed = record_pb2.Record(key="vectors")
    embed.embed_request.model = "reference"
    with pytest.raises(TrajectoryError, match="an Embed call"):
        trajectory_from_records([embed])


def test_an_empty_rollout_is_an_empty_trajectory():
    got = trajectory([])
    assert len(got) == 0 and got.turn_count == 0 and got.boundaries.shape == (0, 3)
