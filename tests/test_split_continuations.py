"""Several continuations on a transport that scores one per call: the pipeline sends one call per continuation and
merges the answers (scores in order, usage summed, soft errors kept), here on a fake HTTP scoring server."""

from __future__ import annotations

import orjson
import pytest
from aiohttp import web
from modelir import Model, accumulate, build_request, errors
from modelir.http.executor import Executor
from modelir.pipeline.prepare import merge_continuations, split_continuations
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport
from modelir.transports.manifests import build
from modelir.transports.reference import ReferenceModel
from modelir.v1 import capabilities_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2

C = capabilities_pb2


class _OnePerCall(HttpTransport):
    """A scoring wire that takes one continuation a call (as most engines' prompt-logprob paths do)."""

    name = "one_per_call"
    version = "0.0.1"
    capabilities = frozenset(
        {C.CAPABILITY_COMPLETION, C.CAPABILITY_INPUT_SCORING, C.CAPABILITY_MAX_OUTPUT_TOKENS, C.CAPABILITY_STREAMING}
    )
    limits = capabilities_pb2.ModelLimits()

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        return build(self)

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        (span,) = request.input_scoring.continuations  # one per call, or the pipeline failed to split
        body = {"prompt": request.prompt, "continuation": span.text}
        return HttpRequest("POST", "/score", orjson.dumps(body), (("content-type", "application/json"),))

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        data = orjson.loads(response.body)
        out = response_pb2.Response(id=data["id"], model="scorer")
        out.input_scores.add(logprob_sum=data["sum"], scored_token_count=data["tokens"])
        out.usage.input_token_count = data["input"]
        out.usage.output_token_count = 0
        if data.get("warn"):
            out.errors.add(reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS, message=data["warn"])
        return out

    def stream_lifter(self, request: request_pb2.Request):  # never asked to stream here
        raise NotImplementedError


@pytest.fixture
async def scorer():
    seen: list[dict] = []

    async def score(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        continuation = body["continuation"]
        answer = {"id": f"s{len(seen)}", "sum": -float(len(continuation)), "tokens": len(continuation)}
        answer["input"] = len(body["prompt"]) + len(continuation)
        if continuation == "no":
            answer["warn"] = "no logprob for the first token"
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/score", score)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    executor = Executor(f"http://127.0.0.1:{port}")
    yield Model(_OnePerCall(), name="scorer", executor=executor), seen
    await executor.aclose()
    await runner.cleanup()


def _labels(*labels: str) -> request_pb2.Request:
    request = build_request("scorer", prompt="Answer: ", max_output_tokens=0)
    for label in labels:
        request.input_scoring.continuations.add(text=label)
    return request


async def test_n_continuations_become_n_calls_merged_in_order(scorer):
    model, seen = scorer
    response = await model.arun(_labels("yes", "no", "perhaps"))
    assert sorted(call["continuation"] for call in seen) == ["no", "perhaps", "yes"]
    assert [s.scored_token_count for s in response.input_scores] == [3, 2, 7]
    assert [s.logprob_sum for s in response.input_scores] == [-3.0, -2.0, -7.0]
    assert response.usage.input_token_count == 3 * len("Answer: ") + 3 + 2 + 7
    assert response.usage.output_token_count == 0 and not response.usage.HasField("reasoning_token_count")
    (soft,) = response.errors
    assert soft.reason == errors_pb2.ERROR_REASON_MISSING_LOGPROBS
    assert response.timing.attempt_count == 3


async def test_one_continuation_is_one_call(scorer):
    model, seen = scorer
    response = await model.arun(_labels("yes"))
    assert len(seen) == 1 and len(response.input_scores) == 1


async def test_a_stream_of_a_split_request_folds_to_the_merged_answer(scorer):
    model, seen = scorer
    request = _labels("yes", "perhaps")
    events = [event async for event in model.astream(request)]
    folded = accumulate(events)
    assert [s.scored_token_count for s in folded.input_scores] == [3, 7]
    assert len(seen) == 2


async def test_a_rejected_request_is_rejected_before_any_call(scorer):
    model, seen = scorer
    request = _labels("yes", "no")
    request.sampling.temperature = 0.5  # not claimed
    with pytest.raises(errors.UnsupportedCapabilityError, match="TEMPERATURE"):
        await model.arun(request)
    assert not seen


def test_a_transport_that_scores_all_at_once_is_not_split():
    assert split_continuations(_labels("a", "b"), ReferenceModel()) is None
    assert split_continuations(_labels("a"), _OnePerCall()) is None
    parts = split_continuations(_labels("a", "b"), _OnePerCall())
    assert parts is not None and [p.input_scoring.continuations[0].text for p in parts] == ["a", "b"]


def test_merge_sums_usage_details_and_keeps_absent_counts_absent():
    one = response_pb2.Response(input_scores=[logprobs_pb2.InputScores(logprob_sum=-1)])
    one.usage.input_token_count = 4
    one.usage.details["cache_write_5m_token_count"] = 2
    two = response_pb2.Response(input_scores=[logprobs_pb2.InputScores(logprob_sum=-2)])
    two.usage.input_token_count = 5
    two.usage.details["cache_write_5m_token_count"] = 1
    merged = merge_continuations([one, two])
    assert merged.usage.input_token_count == 9 and not merged.usage.HasField("output_token_count")
    assert dict(merged.usage.details) == {"cache_write_5m_token_count": 3}
    assert [s.logprob_sum for s in merged.input_scores] == [-1, -2]
