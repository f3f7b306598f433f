"""Replaying the live multi-turn token-in rollouts (`engines/test_token_in_live.py`, recorded with MODELIR_RECORD=1)
without engines: each call's render rounds, the token-id prompt built from them, the request sent and the lift
must come out as recorded (the conformance runner's check), and the recorded prompts keep every earlier id."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from modelir.conformance.runner import run_case

RECORDINGS = Path(__file__).resolve().parents[1] / "conformance" / "recordings"
TRANSPORTS = {"llama-server": "llamacpp", "vllm": "vllm"}
CASES = sorted(RECORDINGS.glob("*/token_in/*.json"))


def _transport(path: Path) -> str:
    return TRANSPORTS[path.parent.parent.name.rsplit("-", 1)[0]]


def test_both_engines_have_a_recorded_rollout():
    assert {_transport(p) for p in CASES} == {"llamacpp", "vllm"}


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_a_recorded_call_replays_exactly(path):
    result = run_case(_transport(path), path)
    assert result.passed, result.problems


@pytest.mark.parametrize("engine", sorted({p.parent.parent.name for p in CASES}))
def test_each_recorded_prompt_is_the_previous_one_then_the_turns_ids(engine):
    cases = sorted((RECORDINGS / engine / "token_in").glob("rollout-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    token_in = [case for case in (orjson.loads(p.read_bytes()) for p in cases) if "token_prompt_rounds" in case]
    # Four turns, each asking for token ids. On llama-server all four run as token-id prompts (the first too: its chat
    # route would not report the prompt's ids); on vLLM the three after the first (its chat route reports them).
    assert len(token_in) == (4 if engine.startswith("llama-server-") else 3)
    for previous, case in itertools.pairwise(token_in):
        before, now = (
            previous["expected_http_request"]["body"]["prompt"],
            case["expected_http_request"]["body"]["prompt"],
        )
        sampled = case["request"]["conversation"]["messages"][-2]["tokenIds"]  # the turn answered since
        assert now[: len(before)] == before
        assert now[len(before) : len(before) + len(sampled)] == sampled
