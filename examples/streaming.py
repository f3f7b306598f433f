"""Streaming with a live progress display: one status line redrawn as the answer arrives, then the answer.

Talks to OpenAI chat (set OPENAI_API_KEY; OPENAI_BASE_URL points it elsewhere, as the test does at a local fake).
"""

import asyncio
import sys
import time

import modelir
from modelir.reading.view import delta_text


async def main() -> None:
    async with modelir.connect("openai_chat", "gpt-4o-mini") as model:
        request = modelir.build_request(model.name, messages=[("user", "Tell me a story.")])
        started, received, text = time.monotonic(), modelir.StreamAccumulator(), ""
        async for event in model.astream(request):
            received.add(event)
            text += delta_text(event)
            rate = len(text) / (time.monotonic() - started)
            sys.stderr.write(f"\r\033[K{len(text):6} chars {rate:8,.0f}/s  {text[-60:]!r}")
    reply = modelir.view(received.response())
    print(f"\n{reply.text}\n({reply.finish_reason}, {reply.usage})", file=sys.stderr)
    print(reply.text)


asyncio.run(main())
