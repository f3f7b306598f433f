"""Streaming with a live progress display, with the official openai SDK."""

import asyncio
import sys
import time

from openai import AsyncOpenAI


async def main() -> None:
    client = AsyncOpenAI()
    stream = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Tell me a story."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    started, text, finish, usage = time.monotonic(), "", None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        rate = len(text) / (time.monotonic() - started)
        sys.stderr.write(f"\r\033[K{len(text):6} chars {rate:8,.0f}/s  {text[-60:]!r}")
    await client.close()
    counts = f"input {usage.prompt_tokens}, output {usage.completion_tokens}" if usage else "no usage"
    print(f"\n{text}\n({finish}, {counts})", file=sys.stderr)
    print(text)


asyncio.run(main())
