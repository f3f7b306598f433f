"""Multi-turn token-in: one token-id prompt from a conversation whose earlier assistant turns carry their sampled ids.

An RL rollout gives each assistant turn back with `Message.token_ids`, the ids the engine sampled. Decoding them to
text and rendering the conversation again re-tokenizes them, and the ids can change (BPE merges across a boundary,
a token that ends inside a UTF-8 character). Here the turns' ids are kept verbatim and only what lies between them
(the earlier prompt, the new tool results and user turns, each generation prompt) comes from the model's own chat
template, rendered and tokenized by the engine. This module is pure: it says which renders it needs (`plan`), and
from the engine's token ids for them it builds the prompt and checks it (`assemble`); the executor makes the calls
(`calls.token_prompt`), each transport through its own endpoints (`HttpTransport.token_prompt_steps`).

The rule, for token turns at message indexes a_1 < ... < a_n, n >= 0 (every other message renders through the template):

* Every render is of the conversation with each token turn's parts replaced by one text part, a sentinel that names
  the turn (`sentinel`), with the generation prompt: G_k is the render of the messages before turn k (what turn k
  was sampled from); W is the render of the whole conversation. Both are token ids, as the engine's chat route
  tokenizes a rendered prompt; s_k are the ids of sentinel k alone.
* The template is prefix-preserving for this conversation when, for every k, G_k is a prefix of W and the ids right
  after it are s_k (turn k's content starts where its generation prompt ended). Otherwise the call fails with
  `InvalidRequestError` naming `conversation.messages[a_k].token_ids` and what differed: never a silent re-render.
* The prompt is G_1, then for each k: turn k's ids, then W from the end of s_k to the end of G_(k+1) (or to W's
  end after the last turn): the template's close of turn k, the new messages and the next generation prompt. When a
  turn's last id is the first id of its close, that id is the end-of-turn token the engine sampled and the template
  writes, and it is not repeated.

With no token turns (n = 0: a rollout's first turn, on a transport whose chat route never reports the prompt's ids,
`HttpTransport.runs_as_token_prompt`) there is nothing to check and nothing to keep: the plan is the one render W and
the prompt is W, the conversation as the chat route would have rendered and tokenized it, now known id by id.

So each turn's prompt is the previous turn's prompt, then that turn's sampled ids, then the rendered new messages:
no earlier id changes. A turn's own parts are never rendered (its ids stand in for them), so a template that
rewrites an assistant turn's content (drops its past reasoning, re-serialises its tool calls) does not change what
the engine sees; what must hold is that everything around the turns renders as it did when each was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from modelir import errors
from modelir.v1 import content_pb2, errors_pb2, request_pb2


def sentinel(turn: int) -> str:
    """The text that stands for token turn `turn` (its message index) in every render: plain ASCII that no
    template rewrites and no conversation is likely to hold."""
    return f"[[modelir-token-turn-{turn}]]"


def token_turns(request: request_pb2.Request) -> list[int]:
    """The indexes of the messages that carry `token_ids` (empty when the request is not multi-turn token-in)."""
    if request.WhichOneof("input") != "conversation":
        return []
    return [i for i, m in enumerate(request.conversation.messages) if m.token_ids]


def is_token_in(request: request_pb2.Request) -> bool:
    """Whether `request` is a conversation with token turns: it runs as a token-id prompt built here."""
    return bool(token_turns(request))


def unsupported(request: request_pb2.Request) -> list[str]:
    """What a token-in conversation cannot carry, since it runs as a token-id prompt on the engine's completion
    route: the template is applied here, so nothing may ask the engine's chat route to do more than render."""
    turns = token_turns(request)
    if not turns:
        return []
    messages = request.conversation.messages
    reasons = []
    if any(messages[i].role != content_pb2.ROLE_ASSISTANT for i in turns):
        reasons.append("Message.token_ids belongs on assistant messages only (the ids a turn was sampled as).")
    return reasons + cannot_carry(request)


def cannot_carry(request: request_pb2.Request) -> list[str]:
    """What `request` (a conversation) asks for that a token-id prompt cannot carry, one sentence each; empty
    when it can run as one. A token-in conversation with any of these is refused (`unsupported`); a first turn
    with any of these stays on the engine's chat route (see the transport's `runs_as_token_prompt`)."""
    messages = request.conversation.messages
    reasons = []
    if messages and messages[-1].role == content_pb2.ROLE_ASSISTANT:
        # The generation prompt follows the last message: an assistant turn to continue has no place in W.
        reasons.append(
            "A token-id prompt ends with what the model answers (a user turn or tool results), not a turn to continue."
        )
    if request.prefill:
        reasons.append("A token-id prompt takes no prefill; give the prefix as the last turn's ids instead.")
    if request.HasField("input_scoring"):
        reasons.append("A token-id prompt is not scored; send the token ids as input to score them.")
    if request.HasField("tool_choice"):
        reasons.append("A token-id prompt cannot force a tool choice.")
    if request.HasField("reasoning_controls"):
        reasons.append("A token-id prompt takes no reasoning controls.")
    return reasons


@dataclass(frozen=True, slots=True)
class Plan:
    """The renders a token-in request needs. `renders[k]` is G_k (the conversation before token turn k) and the
    last is W (the whole conversation), each to be rendered with the generation prompt and tokenized as the
    engine's chat route would; `sentinels[k]` is turn k's sentinel, to be tokenized alone (no special tokens)."""

    turns: tuple[int, ...]
    renders: tuple[request_pb2.Request, ...]
    sentinels: tuple[str, ...]


def plan(request: request_pb2.Request) -> Plan:
    """The renders `request` needs (see `Plan`): each a request with only the conversation and the tools. With no
    token turns, the one render W."""
    turns = token_turns(request)
    stood_in = request_pb2.Conversation()
    for i, message in enumerate(request.conversation.messages):
        added = stood_in.messages.add()
        if i in turns:
            added.role = message.role
            added.name = message.name
            added.parts.add().text = sentinel(i)
        else:
            added.CopyFrom(message)

    def render(count: int) -> request_pb2.Request:
        out = request_pb2.Request(model=request.model, tools=request.tools)
        out.conversation.messages.extend(stood_in.messages[:count])
        return out

    renders = [render(i) for i in turns] + [render(len(stood_in.messages))]
    return Plan(tuple(turns), tuple(renders), tuple(sentinel(i) for i in turns))


def _refusal(turn: int, why: str) -> errors.InvalidRequestError:
    field = f"conversation.messages[{turn}].token_ids"
    return errors.InvalidRequestError(
        [errors_pb2.FieldViolation(field=field, description=why)],
        message=f"the chat template is not prefix-preserving for this conversation at {field}: {why}",
    )


def _parting(a: Sequence[int], b: Sequence[int]) -> int:
    """The first position where `a` and `b` differ (the shorter's length when one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def assemble(
    request: request_pb2.Request,
    the_plan: Plan,
    rendered: Sequence[Sequence[int]],
    sentinel_ids: Sequence[Sequence[int]],
) -> list[int]:
    """The token-id prompt (see the module's rule), from the engine's ids for `the_plan.renders` and for its
    sentinels; raises `InvalidRequestError` naming the turn where the template is not prefix-preserving. With no
    token turns, W itself."""
    messages = request.conversation.messages
    whole = list(rendered[-1])
    prompt: list[int] = []
    resume = 0  # where in `whole` the ids not yet taken start
    for k, turn in enumerate(the_plan.turns):
        before, own = list(rendered[k]), list(sentinel_ids[k])
        if whole[: len(before)] != before:
            at = _parting(whole, before)
            raise _refusal(
                turn,
                f"the render of messages[:{turn}] with the generation prompt ({len(before)} tokens; what this turn "
                f"was sampled from) is not a prefix of the whole conversation's render: they differ at token {at}",
            )
        if len(before) < resume or whole[len(before) : len(before) + len(own)] != own:
            raise _refusal(
                turn,
                "the whole conversation's render does not write this turn right after its generation prompt "
                f"(token {len(before)}), so its sampled ids have no place there",
            )
        between = whole[resume : len(before)]
        if prompt and between and prompt[-1] == between[0]:
            between = between[1:]  # the end-of-turn token the engine sampled is the template's close: once
        prompt += between
        prompt += messages[turn].token_ids
        resume = len(before) + len(own)
    rest = whole[resume:]
    if prompt and rest and prompt[-1] == rest[0]:
        rest = rest[1:]
    return prompt + rest


def token_request(request: request_pb2.Request, prompt: Sequence[int]) -> request_pb2.Request:
    """The request that runs: `request` with the token-id prompt as its input, and without what the template has
    already put into that prompt (the conversation, the tools)."""
    out = request_pb2.Request()
    out.CopyFrom(request)
    out.ClearField("tools")
    out.token_ids.ids.extend(prompt)  # setting the oneof clears the conversation
    return out
