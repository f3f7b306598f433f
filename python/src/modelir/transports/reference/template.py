"""The reference model's prompt: a raw prompt, token ids, or a conversation through its chat template, as tokens.

The chat template writes `<|role|>` headers, reasoning in `<think>` (unsealed from its artifact), tool
declarations and tool traffic as tagged JSON, and ends with the assistant header and any prefill.
"""

from __future__ import annotations

from collections.abc import Callable

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
    return [BOS, *token_ids(render(request, unseal))]


def render(request: request_pb2.Request, unseal: Unseal) -> str:
    """The chat template: `<|role|>` headers, reasoning in `<think>`, tool traffic as tagged JSON."""
    out = []
    if request.tools:
        declared = [
            {
                "name": t.function.name,
                "description": t.function.description,
                "parameters": t.function.parameters_json_schema,
            }
            for t in request.tools
        ]
        out.append(f"<|tools|>\n{orjson.dumps(declared).decode()}\n")
    for message in request.conversation.messages:
        role = content_pb2.Role.Name(message.role).removeprefix("ROLE_").lower()
        body = []
        for part in message.parts:
            kind = part.WhichOneof("content")
            if kind == "text":
                body.append(part.text)
            elif kind == "refusal":
                body.append(f"<refusal>{part.refusal}</refusal>")
            elif kind == "reasoning":
                text = part.reasoning.text
                for artifact in part.artifacts:
                    text = unseal(artifact, part) or text
                body.append(f"<think>{text}</think>")
            elif kind == "tool_call":
                call = part.tool_call
                body.append(f'<tool_call>{{"name":"{call.name}","arguments":{call.arguments_json}}}</tool_call>')
            elif kind == "tool_result":
                result = "".join(p.text for p in part.tool_result.content)
                body.append(f"<tool_result id={part.tool_result.tool_call_id}>{result}</tool_result>")
        out.append(f"<|{role}|>\n{''.join(body)}\n")
    out.append("<|assistant|>\n" + request.prefill)
    return "".join(out)
