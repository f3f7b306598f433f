"""Turning a complete `Response` into stream events: the inverse of `accumulate`, for in-process transports.

Text is cut into chunks of characters (never bytes, so no character is split) and logprobs into chunks of tokens;
the i-th chunks travel in the same delta. Folding the events gives back the response exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

from modelir.v1 import content_pb2, logprobs_pb2, response_pb2, stream_pb2


def _logprob_chunks(logprobs: logprobs_pb2.TokenLogprobs, size: int) -> list[logprobs_pb2.TokenLogprobs]:
    n = len(logprobs.logprobs)
    has_bytes = bool(logprobs.token_byte_offsets)
    ends = [*logprobs.token_byte_offsets[1:], len(logprobs.token_bytes)] if has_bytes else []
    top_starts = [0]
    for count in logprobs.top_counts:
        top_starts.append(top_starts[-1] + count)
    top_ends = [*logprobs.top_token_byte_offsets[1:], len(logprobs.top_token_bytes)]
    chunks = []
    for start in range(0, n, size):
        stop = min(n, start + size)
        chunk = logprobs_pb2.TokenLogprobs(basis=logprobs.basis)
        if logprobs.token_ids:
            chunk.token_ids.extend(logprobs.token_ids[start:stop])
        chunk.logprobs.extend(logprobs.logprobs[start:stop])
        chunk.tokens.extend(logprobs.tokens[start:stop])
        if has_bytes:
            b0 = logprobs.token_byte_offsets[start]
            chunk.token_bytes = logprobs.token_bytes[b0 : ends[stop - 1]]
            chunk.token_byte_offsets.extend([o - b0 for o in logprobs.token_byte_offsets[start:stop]])
        if logprobs.top_counts:
            t0, t1 = top_starts[start], top_starts[stop]
            chunk.top_counts.extend(logprobs.top_counts[start:stop])
            if logprobs.top_token_ids:
                chunk.top_token_ids.extend(logprobs.top_token_ids[t0:t1])
            chunk.top_logprobs.extend(logprobs.top_logprobs[t0:t1])
            chunk.top_tokens.extend(logprobs.top_tokens[t0:t1])
            if logprobs.top_token_byte_offsets and t1 > t0:
                tb0 = logprobs.top_token_byte_offsets[t0]
                chunk.top_token_bytes = logprobs.top_token_bytes[tb0 : top_ends[t1 - 1]]
                chunk.top_token_byte_offsets.extend([o - tb0 for o in logprobs.top_token_byte_offsets[t0:t1]])
        chunks.append(chunk)
    return chunks


def _part_deltas(choice_index: int, part_index: int, part: content_pb2.Part, size: int):
    kind = part.WhichOneof("content")
    base = {"choice_index": choice_index, "part_index": part_index}
    deltas = []
    if kind == "text":
        text = part.text
        pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        deltas = [stream_pb2.PartDelta(text=p, **base) for p in pieces]
    elif kind == "reasoning":
        r = part.reasoning
        pieces = [r.text[i : i + size] for i in range(0, len(r.text), size)] or [""]
        deltas = [stream_pb2.PartDelta(reasoning=stream_pb2.ReasoningDelta(text=p), **base) for p in pieces]
        for k, summary in enumerate(r.summary):
            deltas.append(
                stream_pb2.PartDelta(reasoning=stream_pb2.ReasoningDelta(summary_index=k, summary_text=summary), **base)
            )
    elif kind == "tool_call":
        call = part.tool_call
        args = call.arguments_json
        pieces = [args[i : i + size] for i in range(0, len(args), size)] or [""]
        deltas = [stream_pb2.PartDelta(tool_call=stream_pb2.ToolCallDelta(arguments_json=p), **base) for p in pieces]
        deltas[0].tool_call.id = call.id
        deltas[0].tool_call.name = call.name
    elif kind == "blob":
        deltas = [stream_pb2.PartDelta(blob=part.blob, **base)]
    deltas[-1].artifacts.extend(part.artifacts)
    if part.item_id:
        deltas[0].item_id = part.item_id
    return deltas


def events_from_response(response: response_pb2.Response, *, chunk_size: int = 16) -> Iterator[stream_pb2.StreamEvent]:
    yield stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id=response.id, model=response.model))
    for choice in response.choices:
        deltas = [
            d for j, part in enumerate(choice.message.parts) for d in _part_deltas(choice.index, j, part, chunk_size)
        ]
        chunks = _logprob_chunks(choice.logprobs, chunk_size) if choice.HasField("logprobs") else []
        # Logprobs ride on the text deltas they belong with, in order; leftovers follow on their own.
        text_deltas = [d for d in deltas if d.WhichOneof("content") == "text"]
        for delta, chunk in zip(text_deltas, chunks, strict=False):
            delta.logprobs.CopyFrom(chunk)
        for delta in deltas:
            yield stream_pb2.StreamEvent(delta=delta)
        for chunk in chunks[len(text_deltas) :]:
            yield stream_pb2.StreamEvent(
                delta=stream_pb2.PartDelta(choice_index=choice.index, part_index=0, logprobs=chunk)
            )
    end = stream_pb2.StreamEnd(
        usage=response.usage if response.HasField("usage") else None,
        input_scores=response.input_scores if response.HasField("input_scores") else None,
        timing=response.timing if response.HasField("timing") else None,
        error=response.error if response.HasField("error") else None,
        raw=response.raw if response.HasField("raw") else None,
    )
    end.prompt_token_ids.extend(response.prompt_token_ids)
    end.warnings.extend(response.warnings)
    for choice in response.choices:
        end.finishes.add(
            choice_index=choice.index,
            finish_reason=choice.finish_reason,
            raw_finish_reason=choice.raw_finish_reason,
            stop_sequence=choice.stop_sequence,
        )
    yield stream_pb2.StreamEvent(end=end)
