"""One response of the reference model: per choice, reasoning, then a tool call, a constrained answer or free text.

Every choice has its own generator, seeded from the request's seed and the choice index; the logprobs of every
generated token (reasoning included, as an engine reports them) are read back from the table, and usage counts
every token. Each choice carries its sampled token ids with the part each belongs to (reasoning, text, tool call;
-1 for a trimmed stop string, stop token or EOS, which come last), and its own output token count. The response
reports the prompt token ids it continued (`Response.prompt_token_ids`), as vLLM does: the trajectory a trainer
reads from a multi-turn rollout starts from them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import orjson

from modelir.reading import stops
from modelir.transports.reference import scoring, template
from modelir.transports.reference.json_emitter import emit_json
from modelir.transports.reference.sampler import Generator, Sampler
from modelir.transports.reference.sealing import Sealer
from modelir.transports.reference.vocabulary import LETTERS
from modelir.v1 import content_pb2, request_pb2, response_pb2

DEFAULT_MAX_OUTPUT_TOKENS = 256
# What the reference model writes under a plain JSON-object constraint: an object with a few typed members.
_JSON_OBJECT = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
}
_REASONING_LENGTH = {
    request_pb2.REASONING_EFFORT_MINIMAL: 8,
    request_pb2.REASONING_EFFORT_LOW: 24,
    request_pb2.REASONING_EFFORT_MEDIUM: 64,
    request_pb2.REASONING_EFFORT_HIGH: 160,
}


@dataclass(slots=True)
class _Choice:
    """One choice while it is generated: its parts and the ids of the tokens that carry logprobs."""

    parts: list[content_pb2.Part] = field(default_factory=list)
    scored_prev: list[int] = field(default_factory=list)
    scored_ids: list[int] = field(default_factory=list)
    part_indexes: list[int] = field(default_factory=list)  # the part of each scored (kept) token
    trimmed: list[int] = field(default_factory=list)  # sampled, then trimmed from the text
    label: str = ""  # the label chosen under a choice constraint
    output_tokens: int = 0
    reasoning_tokens: int = 0
    finish: int = 0
    raw_finish: str = ""
    stop_sequence: str | int = ""  # a stop string, or a stop token id


def generate(request: request_pb2.Request, sealer: Sealer, issuer: content_pb2.Issuer) -> response_pb2.Response:
    """The response to a checked request, as the model `issuer` names (`sealer` signs its reasoning)."""
    sealer.verify(request)
    context = template.context(request, sealer.unseal)
    s = request.sampling
    sampler = Sampler(
        temperature=s.temperature if s.HasField("temperature") else 1.0,
        top_k=s.top_k if s.HasField("top_k") else 0,
        top_p=s.top_p if s.HasField("top_p") else 1.0,
        min_p=s.min_p if s.HasField("min_p") else 0.0,
        logit_bias=tuple(sorted(s.logit_bias.items())),
    )
    max_tokens = s.max_output_tokens if s.HasField("max_output_tokens") else DEFAULT_MAX_OUTPUT_TOKENS
    seed = s.seed if s.HasField("seed") else 0
    response = response_pb2.Response(id=_response_id(request), model=issuer.model)
    output_tokens = reasoning_tokens = 0
    for index in range(max(1, s.choice_count)):
        gen = Generator(context, sampler, seed + 1_000_003 * index, max_tokens)
        gen.min_tokens = s.min_output_tokens if s.HasField("min_output_tokens") else 0
        choice = _generate_choice(request, gen, max_tokens, sealer, issuer)
        output_tokens += choice.output_tokens
        reasoning_tokens += choice.reasoning_tokens
        out = response.choices.add(index=index, finish_reason=choice.finish, raw_finish_reason=choice.raw_finish)
        stops.set_stop(out, choice.stop_sequence)
        out.message.role = content_pb2.ROLE_ASSISTANT
        out.message.parts.extend(choice.parts)
        out.output_token_count = choice.output_tokens
        out.constrained_label = choice.label
        if choice.scored_ids or choice.trimmed:
            out.sampled_tokens.token_ids.extend(choice.scored_ids + choice.trimmed)
            out.sampled_tokens.part_indexes.extend(choice.part_indexes + [-1] * len(choice.trimmed))
        if request.HasField("logprob_options"):
            out.logprobs.CopyFrom(
                scoring.columns(choice.scored_prev, choice.scored_ids, request.logprob_options.top_logprob_count)
            )
    if request.HasField("input_scoring"):
        response.input_scores.extend(scoring.score_input(request, context))
    response.prompt_token_ids.extend(context)  # the context as the model saw it: BOS, template, turns' own ids
    response.usage.input_token_count = len(context) + sum(len(span) for span in scoring.spans(request))
    response.usage.output_token_count = output_tokens
    if request.HasField("reasoning_controls"):
        response.usage.reasoning_token_count = reasoning_tokens
    return response


def _generate_choice(
    request: request_pb2.Request, gen: Generator, max_tokens: int, sealer: Sealer, issuer: content_pb2.Issuer
) -> _Choice:
    choice = _Choice()
    stop = [x.encode() for x in request.sampling.stop]
    stop_ids = set(request.sampling.stop_token_ids)
    if max_tokens == 0:
        choice.finish, choice.raw_finish = response_pb2.FINISH_REASON_LENGTH, "length"
        choice.parts.append(content_pb2.Part(text=""))
        return choice

    if _wants_reasoning(request):
        _reason(request, gen, choice, sealer, issuer)
    reasoning_parts = len(choice.parts)

    answer_start = len(gen.emitted)
    tool = _tool_to_call(request)
    kind = request.constraint.WhichOneof("kind")
    finish: int = response_pb2.FINISH_REASON_STOP
    raw = "eos"
    stop_seq: str | int = ""
    if tool is not None:
        ok = emit_json(gen, orjson.loads(tool.function.parameters_json_schema or b'{"type":"object"}'))
        arguments = bytes(gen.emitted[answer_start:]).decode()
        call_id = "call_" + hashlib.sha256(f"{choice.output_tokens}:{arguments}".encode()).hexdigest()[:16]
        choice.parts.append(
            content_pb2.Part(
                tool_call=content_pb2.ToolCall(id=call_id, name=tool.function.name, arguments_json=arguments)
            )
        )
        finish, raw = (
            (response_pb2.FINISH_REASON_TOOL_CALLS, "tool_calls")
            if ok
            else (response_pb2.FINISH_REASON_LENGTH, "length")
        )
    else:
        if kind == "choice":
            labels = list(request.constraint.choice.labels)
            label = labels[gen.pick_sequence([x.encode() for x in labels])]
            if gen.force(label.encode()):
                choice.label = label
            else:
                finish, raw = response_pb2.FINISH_REASON_LENGTH, "length"
        elif kind == "json_schema":
            if not emit_json(gen, orjson.loads(request.constraint.json_schema.schema_json)):
                finish, raw = response_pb2.FINISH_REASON_LENGTH, "length"
        elif kind == "json_object":
            if not emit_json(gen, _JSON_OBJECT):
                finish, raw = response_pb2.FINISH_REASON_LENGTH, "length"
        else:
            finish, raw, stop_seq = gen.free_text(gen.budget, stop, stop_ids)
        choice.parts.append(content_pb2.Part(text=bytes(gen.emitted[answer_start:]).decode("utf-8")))
    choice.scored_prev = list(gen.prevs)
    choice.scored_ids = list(gen.emitted)
    # The reasoning part holds every token before the answer (its `<think>` tags too); the answer part the rest.
    choice.part_indexes = [0] * answer_start + [reasoning_parts] * (len(gen.emitted) - answer_start)
    choice.trimmed = list(gen.trimmed)
    choice.output_tokens = max_tokens - gen.budget
    choice.finish, choice.raw_finish, choice.stop_sequence = finish, raw, stop_seq
    return choice


def _reason(
    request: request_pb2.Request, gen: Generator, choice: _Choice, sealer: Sealer, issuer: content_pb2.Issuer
) -> None:
    controls = request.reasoning_controls
    if controls.WhichOneof("amount") == "budget_tokens":
        length = controls.budget_tokens
    else:
        length = _REASONING_LENGTH.get(controls.effort, _REASONING_LENGTH[request_pb2.REASONING_EFFORT_LOW])
    gen.force(b"<think>")
    start = len(gen.emitted)
    gen.sample_class(LETTERS, min(length, max(0, gen.budget - 8)))
    thought = bytes(gen.emitted[start:]).decode()
    gen.force(b"</think>")
    choice.reasoning_tokens = len(gen.emitted)
    reasoning = content_pb2.Reasoning()
    if controls.summary != request_pb2.REASONING_SUMMARY_UNSPECIFIED:
        reasoning.summary.append(thought[:40].strip())
    part = content_pb2.Part(reasoning=reasoning)
    # Hidden reasoning travels sealed, like a provider's redacted thinking.
    sealer.attach(part, thought, visible=controls.include_thoughts, issuer=issuer)
    choice.parts.append(part)


def _response_id(request: request_pb2.Request) -> str:
    return "ref-" + hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()[:24]


def _wants_reasoning(request: request_pb2.Request) -> bool:
    if not request.HasField("reasoning_controls"):
        return False
    controls = request.reasoning_controls
    return not (controls.WhichOneof("amount") == "effort" and controls.effort == request_pb2.REASONING_EFFORT_NONE)


def may_call_tools(request: request_pb2.Request) -> bool:
    """Whether the request offers tools and does not forbid calling them."""
    choice = request.tool_choice
    return bool(request.tools) and not (
        choice.WhichOneof("choice") == "mode" and choice.mode == request_pb2.TOOL_CHOICE_MODE_NONE
    )


def _tool_to_call(request: request_pb2.Request) -> request_pb2.Tool | None:
    """Which tool to call: the named one; under REQUIRED, the first; under AUTO, one the user just named."""
    if not may_call_tools(request):
        return None
    choice = request.tool_choice
    if choice.WhichOneof("choice") == "tool_name":
        return next(t for t in request.tools if t.function.name == choice.tool_name)
    if choice.WhichOneof("choice") == "mode" and choice.mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED:
        return request.tools[0]
    if request.WhichOneof("input") == "conversation" and request.conversation.messages:
        last = request.conversation.messages[-1]
        if last.role == content_pb2.ROLE_USER:
            text = "".join(p.text for p in last.parts if p.WhichOneof("content") == "text")
            for tool in request.tools:
                if tool.function.name in text:
                    return tool
    return None
