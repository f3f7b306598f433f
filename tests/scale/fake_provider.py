"""A local OpenAI-compatible chat provider with a quota, for the fleet tests (127.0.0.1 only).

Run as `python -m tests.scale.fake_provider PORT`. It enforces `rpm` requests per minute as a token bucket (a
full minute's worth at most, refilled continuously: the way providers describe their limits) and answers 429
with `Retry-After` past it, counting every such request as over quota. `POST /control` sets `rpm`, `delay`
(seconds before answering) and `fail_next` (statuses, with `retry_after`, to answer the next requests with) and
resets the counters; `GET /stats` tells what it saw: requests served, over quota, and each arrival's time
(`time.time()`) and requested model (each replica asks for its own provider model, so arrivals say which
replica sent them).
"""

from __future__ import annotations

import asyncio
import sys
import time

from aiohttp import web

from tests.fake_openai import completion_body


class QuotaProvider:
    def __init__(self) -> None:
        self.reset({})

    def reset(self, settings: dict) -> None:
        self.rpm = float(settings.get("rpm") or 0)
        self.delay = float(settings.get("delay") or 0)
        self.fail_next = list(settings.get("fail_next") or [])
        self.level = self.rpm
        self.stamp = time.monotonic()
        self.served = 0
        self.over_quota = 0
        self.arrivals: list[tuple[float, str, int]] = []  # (time.time(), model, status)

    def _take(self) -> float:
        """0 when the request is within quota (and takes one unit), else seconds until one unit is back."""
        if not self.rpm:
            return 0.0
        now = time.monotonic()
        self.level = min(self.rpm, self.level + (now - self.stamp) * self.rpm / 60)
        self.stamp = now
        if self.level >= 1 - 1e-6:
            self.level -= 1
            return 0.0
        return (1 - self.level) * 60 / self.rpm

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        model = body.get("model", "")
        if self.fail_next:
            failure = self.fail_next.pop(0)
            self.arrivals.append((time.time(), model, failure["status"]))
            headers = {"retry-after": str(failure["retry_after"])} if "retry_after" in failure else {}
            error = {"error": {"message": "injected", "type": "requests"}}
            return web.json_response(error, status=failure["status"], headers=headers)
        wait = self._take()
        if wait:
            self.over_quota += 1
            self.arrivals.append((time.time(), model, 429))
            return web.json_response(
                {"error": {"message": "over quota", "type": "requests", "code": "rate_limit_exceeded"}},
                status=429,
                headers={"retry-after": f"{wait:.3f}"},
            )
        self.arrivals.append((time.time(), model, 200))
        if self.delay:
            await asyncio.sleep(self.delay)
        self.served += 1
        return web.json_response(completion_body(model))

    async def control(self, request: web.Request) -> web.Response:
        self.reset(await request.json())
        return web.json_response({"ok": True})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"served": self.served, "over_quota": self.over_quota, "arrivals": self.arrivals})


def main(port: int) -> None:
    provider = QuotaProvider()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", provider.chat)
    app.router.add_post("/control", provider.control)
    app.router.add_get("/stats", provider.stats)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main(int(sys.argv[1]))
