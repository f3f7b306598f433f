"""200 concurrent requests under a limiter: at most 16 in flight, retries and rate-limit pauses handled inside.

Talks to OpenAI chat (set OPENAI_API_KEY; OPENAI_BASE_URL points it elsewhere, as the test does at a local fake).
"""

import asyncio
import time

import modelir


async def main() -> None:
    async with modelir.connect("openai_chat", "gpt-4o-mini", max_concurrency=16) as model:
        started = time.monotonic()
        replies = await asyncio.gather(*(model.achat([("user", f"Say hi to #{i}")]) for i in range(200)))
    tokens = sum(modelir.view(r).usage.output or 0 for r in replies)
    print(f"{len(replies)} answers, {tokens} output tokens in {time.monotonic() - started:.2f}s")
    print(f"first: {modelir.view(replies[0]).text!r}")


asyncio.run(main())
