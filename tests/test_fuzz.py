"""Fuzzed native answers never escape untyped: every lift, stream lifter, error mapping and tokenize lift.

A bounded run over every fixture of every transport (`tests/fuzz/`); `make fuzz` runs longer. The seed is printed,
so a failure reproduces with `python -m tests.fuzz --seed N`. Set MODELIR_FUZZ_SEED to pin it here.
"""

from __future__ import annotations

import os
import random

import httpx
import pytest
from modelir import Model, build_request, errors
from modelir.http.executor import Executor
from modelir.registry import build_transport

from tests.fuzz.drive import load_exchanges, run

# A budget of inputs, not of seconds: a loaded machine fuzzes as much as an idle one, only slower (about 10 s idle).
INPUTS = int(os.environ.get("MODELIR_FUZZ_INPUTS", "8000"))
SECONDS_CAP = 600.0  # far beyond any machine: a run this slow is a hang, which pytest-timeout reports first


@pytest.mark.timeout(SECONDS_CAP + 60)
def test_fuzzed_answers_end_typed():
    seed = int(os.environ.get("MODELIR_FUZZ_SEED", random.randrange(2**32)))
    report = run(seed, seconds=SECONDS_CAP, max_inputs=INPUTS)
    print(report.summary())
    assert report.inputs == INPUTS, report.summary()
    assert not report.escapes, report.summary()
    assert not report.dropped, report.summary()  # every native member read, kept, declared or warned about
    assert not report.wrong_shape_successes, report.summary()  # wrong-shape bodies taken as an empty answer
    # Every transport's answers were lifted, not only refused: a harness that never reaches a lift finds nothing.
    assert set(report.lifted_by_transport) == {e.transport for e in load_exchanges()}, report.lifted_by_transport


@pytest.mark.parametrize("body", [b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"[" * 100_000])
async def test_an_answer_nested_deeper_than_any_wire_is_malformed(body):
    transport = build_transport("openai_chat", {"provider_model": "m"})
    executor = Executor(
        "http://deep.invalid", transport=httpx.MockTransport(lambda _: httpx.Response(200, content=body))
    )
    model = Model(transport, name="m", executor=executor)
    try:
        with pytest.raises(errors.MalformedResponseError):
            await model.arun(build_request("m", messages=[("user", "hi")]))
    finally:
        await executor.aclose()
