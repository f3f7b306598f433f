"""Retry hints and stream answers that break the rules end typed: no overflow, no retry of what cannot change."""

from __future__ import annotations

import math

import httpx
import pytest
from modelir import errors
from modelir.errors import rich_status
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.transports.base import HttpRequest, HttpResponse, error_for_status, retry_after_seconds


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999", "soon", "", "Fri, 31 Dec 99999 23:59:59 GMT"])
def test_a_retry_after_that_is_not_a_finite_number_is_no_hint(value):
    assert retry_after_seconds({"retry-after": value}) is None
    assert retry_after_seconds({"retry-after-ms": value}) is None


def test_negative_hints_mean_now():
    assert retry_after_seconds({"retry-after": "-5"}) == 0.0


@pytest.mark.parametrize("hint", [math.inf, math.nan, -1.0])
def test_errors_refuse_hints_that_are_not_finite_delays(hint):
    assert errors.RateLimitedError("slow down", retry_after=hint).retry_after is None


@pytest.mark.parametrize("hint", [1e308, 2.0**63, 86400.0 * 365 * 20000])
def test_huge_hints_still_map_to_a_status(hint):
    exc = error_for_status(HttpResponse(429, {}, b""), "slow down", retry_after=hint)
    status = rich_status.to_status(exc)
    assert status.code == 8  # RESOURCE_EXHAUSTED


async def test_a_streamed_call_answered_with_a_page_is_malformed_and_sent_once():
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>Welcome to nginx</html>")

    executor = Executor("http://upstream.invalid", transport=httpx.MockTransport(answer), retry=RetryPolicy())
    request = HttpRequest("POST", "/v1/chat/completions", b"{}", stream_format="sse")
    with pytest.raises(errors.MalformedResponseError, match="text/html"):
        async for _ in executor.stream(request, error_from=lambda r: error_for_status(r, "x")):
            pass
    assert len(calls) == 1
