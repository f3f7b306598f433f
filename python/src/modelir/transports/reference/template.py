"""The reference model's prompt: a raw prompt, token ids, or a conversation through its chat template, as tokens.

The chat template writes `<|role|>` headers, reasoning in `<think>` (unsealed from its artifact), tool
declarations and tool traffic as tagged JSON, and ends with the generation prompt (the assistant header) and any
prefill. An assistant message that carries `token_ids` (multi-turn token-in) renders as exactly those ids between
its header and its closing newline, instead of its parts' text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from modelir.transports.reference.vocabulary import BOS, token_ids
from modelir.v1 import content_pb2, request_pb2

Unseal = Callable[[content_pb2.OpaqueArtifact, content_pb2.Part], str | None]


def context(request: request_pb2.Request, unseal: Unseal) -> list[int]:
    """The tokens the model continues: BOS and the prompt's bytes, the token ids as given, or the rendered chat."""
    kind = request.WhichOneof("input")
    if kind == "prompt":
        return [BOS, *token_ids(request.prompt)]
    if kind == "token_ids":
        return list(request.token_ids.ids)
    return [BOS, *render(request.conversation, request.tools, unseal, prefill=request.prefill)]


def render(
    conversation: request_pb2.Conversation,
    tools: Sequence[request_pb2.Tool],
    unseal: Unseal,
    *,
    generation_prompt: bool = True,
    prefill: str = "",
) -> list[int]:
    """The chat template's tokens: `<|role|>` headers, reasoning in `<think>`, tool traffic as tagged JSON, an
    assistant turn's own token ids where it has them, and (with `generation_prompt`) the assistant header."""
    out: list[int] = []
    text: list[str] = []  # text not yet tokenized

    def flush() -> None:
        out.extend(token_ids("".join(text)))
        text.clear()

    if tools:
        declared = [
            {
                "name": t.function.name,
                "description": t.function.description,
                "parameters": t.function.parameters_json_schema,
            }
            for t in tools
        ]
        text.append(f"<|tools|>\n{orjson.dumps(declared).decode()}\n")
    for message in conversation.messages:
        role = content_pb2.Role.Name(message.role).removeprefix("ROLE_").lower()
        if message.token_ids:
            text.append(f"<|{role}|>\n")
            flush()
            out.extend(message.token_ids)
            text.append("\n")
            continue
        body = []
        for part in message.parts:
            kind = part.WhichOneof("content")
            if kind == "text":
                body.append(part.text)
            elif kind == "refusal":
                body.append(f"<refusal>{part.refusal}</refusal>")
            elif kind == "reasoning":
                thought = part.reasoning.text
                for artifact in part.artifacts:
                    thought = unseal(artifact, part) or thought
                body.append(f"<think>{thought}</think>")
            elif kind == "tool_call":
                call = part.tool_call
                body.append(f'<tool_call>{{"name":"{call.name}","arguments":{call.arguments_json}}}</tool_call>')
            elif kind == "tool_result":
                result = "".join(p.text for p in part.tool_result.content)
                body.append(f"<tool_result id={part.tool_result.tool_call_id}>{result}</tool_result>")
        text.append(f"<|{role}|>\n{''.join(body)}\n")
    if generation_prompt:
        text.append("<|assistant|>\n" + prefill)
    flush()
    return out
