"""200 concurrent requests with the official openai SDK: the concurrency limit is a semaphore of our own."""

import asyncio
import time

from openai import AsyncOpenAI


async def main() -> None:
    client = AsyncOpenAI()
    limit = asyncio.Semaphore(16)

    async def ask(i: int):
        async with limit:
            messages = [{"role": "user", "content": f"Say hi to #{i}"}]
            return await client.chat.completions.create(model="gpt-4o-mini", messages=messages)

    started = time.monotonic()
    replies = await asyncio.gather(*(ask(i) for i in range(200)))
    await client.close()
    tokens = sum(r.usage.completion_tokens for r in replies if r.usage)
    print(f"{len(replies)} answers, {tokens} output tokens in {time.monotonic() - started:.2f}s")
    print(f"first: {replies[0].choices[0].message.content!r}")


asyncio.run(main())
