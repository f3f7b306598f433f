"""sglang conversations: rendered with the model's own chat template here, tokenized by the engine, run as token ids.

sglang's native `/generate` takes text or `input_ids` and has no chat route and no template endpoint, so a
conversation needs the model's template from the caller (the transport's `tokenizer_config` or `chat_template`,
`transports.chat_template`). Every conversation then runs as a token-id prompt (`token_prompt`): each render the
plan needs (with its sentinels, and the generation prompt) is rendered locally, then all of them and the sentinels
go to sglang's `/tokenize` in one call, so that the ids are the engine's own tokenizer's; the prompt built from them
goes to `/generate` as `input_ids`. A first turn (no token ids yet) is the whole conversation's render, tokenized.

Facts this follows (sglang's `/tokenize`, `TokenizeRequest` / `TokenizeResponse` in
`sglang/srt/entrypoints/openai/protocol.py` and its handler `serving_tokenize.py`): the request is
`{"prompt": str | [str], "add_special_tokens": bool}` (default true), the answer `{"tokens": [int] | [[int]],
"count": ..., "max_model_len": ...}`, one id list per prompt of a list, in order; each text is the tokenizer's
`encode`, which reads special-token text (`<|im_start|>`) as the special token. `add_special_tokens` is false here:
the template writes BOS itself where the model has one, and a sentinel is tokenized alone.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelir import errors
from modelir.transports import _common as common
from modelir.transports import token_prompt
from modelir.transports.base import HttpRequest, TokenPromptSteps
from modelir.transports.chat_template import ChatTemplate
from modelir.transports.manifests import capability_set
from modelir.v1 import content_pb2, request_pb2

JSON_HEADERS = (("content-type", "application/json"),)

# What a configured template adds to the manifest.
CAPABILITIES = capability_set("CHAT SYSTEM_MESSAGES MULTI_TURN_TOKEN_INPUT")

NO_TEMPLATE = (
    "sglang's /generate has no chat route: a conversation is rendered with the model's own chat template, which "
    "this transport needs as its `tokenizer_config` option (the model's tokenizer_config.json) or `chat_template` "
    "option (the template's text)."
)

_ROLES = {
    content_pb2.ROLE_SYSTEM: "system",
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
}


def unsupported(request: request_pb2.Request, template: ChatTemplate | None) -> list[str]:
    """What a conversation asks that the template path cannot give (nothing for a prompt or token ids), each
    named: no template configured, the token-in rules, and every message the template cannot render as it is."""
    if request.WhichOneof("input") != "conversation":
        return []
    if template is None:
        return [NO_TEMPLATE]
    reasons = token_prompt.unsupported(request)
    turns = set(token_prompt.token_turns(request))
    if not turns and request.HasField("input_scoring"):
        reasons.append("sglang scores a prompt, not a rendered conversation: send the prompt as text or token ids.")
    for i, message in enumerate(request.conversation.messages):
        if i in turns:
            continue  # its ids stand in for its parts, which are never rendered
        where = f"conversation.messages[{i}]"
        if message.role not in _ROLES:
            role = content_pb2.Role.Name(message.role)
            reasons.append(f"{where}: the chat template path renders system, user and assistant messages, not {role}.")
        kinds = [p.WhichOneof("content") or "empty" for p in message.parts]
        if kinds != ["text"]:
            reasons.append(
                f"{where}: the chat template path renders one text part per message (this one has "
                f"{', '.join(kinds) or 'no parts'}); an assistant turn with token_ids is not rendered."
            )
    return reasons


def messages(request: request_pb2.Request) -> list[dict[str, Any]]:
    """A render's conversation as the template reads it: `{"role", "content"}` (and `name` where given), as
    Hugging Face passes messages; `unsupported` has made sure each is one text part of a role it knows."""
    out = []
    for message in request.conversation.messages:
        rendered: dict[str, Any] = {"role": _ROLES[message.role], "content": message.parts[0].text}
        if message.name:
            rendered["name"] = message.name
        out.append(rendered)
    return out


def token_prompt_steps(template: ChatTemplate, plan: token_prompt.Plan) -> TokenPromptSteps:
    """Each render of `plan` through the template (with the generation prompt), then one `/tokenize` of every
    render and every sentinel, none with special tokens added."""
    texts = [template.render(messages(render), add_generation_prompt=True) for render in plan.renders]
    body = {"prompt": [*texts, *plan.sentinels], "add_special_tokens": False}
    answers = yield [HttpRequest("POST", "/tokenize", orjson.dumps(body), JSON_HEADERS)]
    tokens = common.parse_json(answers[0].body, "tokenize body").get("tokens")
    wanted = len(texts) + len(plan.sentinels)
    if not (
        isinstance(tokens, list)
        and len(tokens) == wanted
        and all(isinstance(ids, list) and all(type(i) is int for i in ids) for ids in tokens)
    ):
        raise errors.MalformedResponseError(f"sglang: /tokenize did not answer {wanted} lists of token ids")
    return tokens[: len(texts)], tokens[len(texts) :]
