"""The reference model: a built-in, deterministic language model that needs no network and no weights.

It is a byte-level bigram model. Token ids 0-255 are bytes, 256 is BOS and 257 is EOS. A fixed random table of
next-token logits (seeded once, identical on every machine) gives a real probability distribution at every
position, so logprobs, top-k alternatives and input scores are genuine, and sampling is seeded and reproducible.
Free text is sampled from printable ASCII, newline and EOS. Everything it claims in its manifest it honours for
real; whatever it cannot (regex and grammar constraints, FIM, penalties, images) its manifest does not claim.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import orjson

from modelir import errors
from modelir import logprobs as lp
from modelir.streaming import events_from_response
from modelir.transports.base import LocalTransport
from modelir.v1 import (
    capabilities_pb2,
    content_pb2,
    logprobs_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    stream_pb2,
)

C = capabilities_pb2  # Capability values as the module's plain ints: a lookup on the enum wrapper costs ~0.4 us
BOS, EOS, VOCAB = 256, 257, 258
DEFAULT_MAX_OUTPUT_TOKENS = 256
MAX_TOP_LOGPROBS = 20
MAX_CHOICES = 16
_TABLE_SEED = 20261130
_REASONING_LENGTH = {
    request_pb2.REASONING_EFFORT_MINIMAL: 8,
    request_pb2.REASONING_EFFORT_LOW: 24,
    request_pb2.REASONING_EFFORT_MEDIUM: 64,
    request_pb2.REASONING_EFFORT_HIGH: 160,
}
_SUPPORTED_SCHEMA_KEYS = frozenset(
    {"type", "properties", "required", "items", "enum", "const", "minItems", "maxItems"}
    | {"additionalProperties", "description", "title", "$schema"}
)
_SCHEMA_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})

# What each token id spells. Bytes outside printable ASCII are spelled `<0xNN>`, as SentencePiece does.
PIECES: list[str] = [chr(b) if 0x20 <= b < 0x7F or b in (9, 10) else f"<0x{b:02X}>" for b in range(256)]
PIECES += ["<s>", "</s>"]
_PIECE_BYTES: list[bytes] = [bytes([b]) for b in range(256)] + [b"", b""]
_PIECE_LEN = np.array([1] * 256 + [0, 0], dtype=np.int64)


def _ids(text: str | bytes) -> list[int]:
    return list(text.encode() if isinstance(text, str) else text)


def _class_ids(predicate) -> np.ndarray:
    return np.array([b for b in range(256) if predicate(b)], dtype=np.int64)


_PRINTABLE = np.concatenate([_class_ids(lambda b: 0x20 <= b < 0x7F or b == 10), [EOS]])
_LETTERS = _class_ids(lambda b: 0x61 <= b <= 0x7A or b == 0x20)
_DIGITS = _class_ids(lambda b: 0x30 <= b <= 0x39)
_NONZERO_DIGITS = _class_ids(lambda b: 0x31 <= b <= 0x39)


@lru_cache(maxsize=1)
def logprob_table() -> np.ndarray:
    """`table[prev, next]`: the model's log probability of `next` after `prev` (float64, rows sum to 1)."""
    rng = np.random.Generator(np.random.PCG64(_TABLE_SEED))
    logits = rng.normal(0.0, 1.5, size=(VOCAB, VOCAB))
    bonus = np.full(VOCAB, -6.0)
    for b in range(0x20, 0x7F):
        bonus[b] = -1.0
    bonus[ord("a") : ord("z") + 1] = 3.0
    bonus[ord(" ")] = 3.5
    bonus[ord("A") : ord("Z") + 1] = 0.5
    bonus[ord("0") : ord("9") + 1] = 0.0
    for ch in ".,!?'\n":
        bonus[ord(ch)] = 1.0
    bonus[EOS] = -4.5
    bonus[BOS] = -np.inf  # BOS only ever starts a sequence
    logits = logits + bonus
    logits[ord("."), EOS] += 3.0
    logits -= logits.max(axis=1, keepdims=True)
    table = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    table.setflags(write=False)
    return table


@lru_cache(maxsize=1)
def _top_table() -> tuple[np.ndarray, np.ndarray]:
    """Per previous token: the next tokens by descending logprob (ids, logprobs), for top-k alternatives."""
    table = logprob_table()
    order = np.argsort(-table, axis=1, kind="stable")[:, :MAX_TOP_LOGPROBS]
    return order, np.take_along_axis(table, order, axis=1)


@dataclass(frozen=True, slots=True)
class _Sampler:
    temperature: float
    top_k: int
    top_p: float
    min_p: float


@lru_cache(maxsize=64)
def _free_cdf(sampler: _Sampler) -> np.ndarray | None:
    """Cumulative next-token distributions over `_PRINTABLE` for free text; None means greedy."""
    if sampler.temperature == 0:
        return None
    logits = logprob_table()[:, _PRINTABLE] / sampler.temperature
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    order = np.argsort(-probs, axis=1, kind="stable")
    ranked = np.take_along_axis(probs, order, axis=1)
    keep = np.ones_like(ranked, dtype=bool)
    if sampler.top_k:
        keep[:, sampler.top_k :] = False
    if sampler.top_p < 1.0:
        before = np.cumsum(ranked, axis=1) - ranked
        keep &= before < sampler.top_p
    if sampler.min_p > 0:
        keep &= ranked >= sampler.min_p * ranked[:, :1]
    keep[:, 0] = True
    ranked = np.where(keep, ranked, 0.0)
    filtered = np.zeros_like(probs)
    np.put_along_axis(filtered, order, ranked, axis=1)
    filtered /= filtered.sum(axis=1, keepdims=True)
    return np.cumsum(filtered, axis=1)


@dataclass(slots=True)
class _Choice:
    """One choice while it is generated: its parts and the ids of the tokens that carry logprobs."""

    parts: list[content_pb2.Part] = field(default_factory=list)
    scored_prev: list[int] = field(default_factory=list)
    scored_ids: list[int] = field(default_factory=list)
    output_tokens: int = 0
    reasoning_tokens: int = 0
    finish: int = 0
    raw_finish: str = ""
    stop_sequence: str = ""


class _Generator:
    """Generates one choice: free text, forced bytes, and bytes sampled from a class, on one RNG."""

    def __init__(self, context: list[int], sampler: _Sampler, seed: int, budget: int) -> None:
        self.table = logprob_table()
        self.prev = context[-1] if context else BOS
        self.sampler = sampler
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.budget = budget
        self.emitted: list[int] = []  # every generated token, in order
        self.prevs: list[int] = []  # the token before each emitted one

    def _push(self, token: int) -> None:
        self.prevs.append(self.prev)
        self.emitted.append(token)
        self.prev = token
        self.budget -= 1

    def force(self, data: bytes) -> bool:
        """Emit fixed bytes; False when the token budget ran out first."""
        for b in data:
            if self.budget <= 0:
                return False
            self._push(b)
        return True

    def pick(self, candidates: np.ndarray) -> int:
        """Sample one token among `candidates` from the model's distribution (greedy at temperature 0)."""
        row = self.table[self.prev, candidates]
        if self.sampler.temperature == 0:
            return int(candidates[int(np.argmax(row))])
        weights = np.exp((row - row.max()) / self.sampler.temperature)
        cdf = np.cumsum(weights / weights.sum())
        return int(candidates[min(int(np.searchsorted(cdf, self.rng.random())), len(candidates) - 1)])

    def sample_class(self, candidates: np.ndarray, count: int) -> bool:
        for _ in range(count):
            if self.budget <= 0:
                return False
            self._push(self.pick(candidates))
        return True

    def free_text(self, limit: int, stop: list[bytes], stop_ids: set[int]) -> tuple[int, str, str]:
        """Sample free text until EOS, a stop, or `limit` tokens. Returns (finish, raw finish, stop seq)."""
        cdf = _free_cdf(self.sampler)
        start = len(self.emitted)
        draws = self.rng.random(max(limit, 0))
        for i in range(limit):
            if self.budget <= 0:
                return response_pb2.FINISH_REASON_LENGTH, "length", ""
            if cdf is None:
                token = int(_PRINTABLE[int(np.argmax(self.table[self.prev, _PRINTABLE]))])
            else:
                idx = int(np.searchsorted(cdf[self.prev], draws[i]))
                token = int(_PRINTABLE[min(idx, len(_PRINTABLE) - 1)])
            if token == EOS:
                self.budget -= 1
                return response_pb2.FINISH_REASON_STOP, "eos", ""
            if token in stop_ids:
                self.budget -= 1
                return response_pb2.FINISH_REASON_STOP_SEQUENCE, "stop_token", str(token)
            self._push(token)
            if stop:
                tail = bytes(self.emitted[max(start, len(self.emitted) - 64) :])
                for s in stop:
                    if tail.endswith(s):
                        del self.emitted[-len(s) :], self.prevs[-len(s) :]
                        return response_pb2.FINISH_REASON_STOP_SEQUENCE, "stop", s.decode()
        return response_pb2.FINISH_REASON_LENGTH, "length", ""


class ReferenceModel(LocalTransport):
    """The deterministic reference model. `provider_model` is the model id its responses and artifacts name, as
    for every transport; `secret` keys the signatures of its reasoning artifacts."""

    name = "reference"
    version = "1.0.0"

    def __init__(self, *, provider_model: str = "modelir-reference-1", secret: bytes = b"modelir-reference") -> None:
        self.model_id = provider_model
        self._secret = secret

    @property
    def provider_model(self) -> str:
        return self.model_id

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        return capabilities_pb2.CapabilityManifest(
            transport=self.name,
            transport_version=self.version,
            capabilities=sorted(
                [
                    C.CAPABILITY_COMPLETION,
                    C.CAPABILITY_CHAT,
                    C.CAPABILITY_TOKEN_INPUT,
                    C.CAPABILITY_SYSTEM_MESSAGES,
                    C.CAPABILITY_TOOLS,
                    C.CAPABILITY_TOOL_CHOICE,
                    C.CAPABILITY_REASONING,
                    C.CAPABILITY_REASONING_EFFORT,
                    C.CAPABILITY_REASONING_BUDGET,
                    C.CAPABILITY_PREFILL,
                    C.CAPABILITY_INPUT_SCORING,
                    C.CAPABILITY_SAMPLED_LOGPROBS,
                    C.CAPABILITY_SAMPLED_TOKEN_IDS,
                    C.CAPABILITY_TOP_K_LOGPROBS,
                    C.CAPABILITY_CONSTRAINT_CHOICE,
                    C.CAPABILITY_CONSTRAINT_JSON_SCHEMA,
                    C.CAPABILITY_TOKENIZE,
                    C.CAPABILITY_STREAMING,
                    C.CAPABILITY_MULTIPLE_CHOICES,
                    C.CAPABILITY_TEMPERATURE,
                    C.CAPABILITY_TOP_P,
                    C.CAPABILITY_TOP_K_SAMPLING,
                    C.CAPABILITY_MIN_P,
                    C.CAPABILITY_MAX_OUTPUT_TOKENS,
                    C.CAPABILITY_STOP_SEQUENCES,
                    C.CAPABILITY_STOP_TOKEN_IDS,
                    C.CAPABILITY_SEED,
                ]
            ),
            limits=capabilities_pb2.ModelLimits(
                max_top_logprobs=MAX_TOP_LOGPROBS, max_choices=MAX_CHOICES, max_output_tokens=1 << 16
            ),
        )

    # ---- what the catalog cannot express -------------------------------------------------------------

    def extra_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.constraint.WhichOneof("kind") == "json_schema":
            reasons += _schema_gaps(request.constraint.json_schema.schema_json, "the JSON schema constraint")
        if _may_call_tools(request):
            for tool in request.tools:
                if tool.parameters_json_schema:
                    reasons += _schema_gaps(tool.parameters_json_schema, f"the parameters of tool {tool.name!r}")
        if request.WhichOneof("input") == "token_ids" and any(t >= VOCAB for t in request.token_ids.ids):
            reasons.append(f"The reference model's vocabulary has {VOCAB} tokens (ids 0 to {VOCAB - 1}).")
        return reasons

    # ---- the transport interface -------------------------------------------------------------------

    async def run(self, request: request_pb2.Request) -> response_pb2.Response:
        return self.generate(request)

    async def stream(self, request: request_pb2.Request) -> AsyncIterator[stream_pb2.StreamEvent]:
        for event in events_from_response(self.generate(request)):
            yield event

    async def tokenize(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse:
        ids = _ids(request.text)
        if request.add_special_tokens and not request.context:
            ids = [BOS, *ids]
        out = service_pb2.TokenizeResponse(token_ids=ids, pieces=[PIECES[i] for i in ids])
        pieces = [_PIECE_BYTES[i] for i in ids]
        out.token_bytes = b"".join(pieces)
        out.token_byte_offsets.extend(lp.offsets_of(pieces))
        return out

    async def detokenize(self, token_ids: list[int]) -> str:
        """Bytes back to text; special tokens have no text."""
        return bytes(t for t in token_ids if t < 256).decode("utf-8", "replace")

    # ---- generation ---------------------------------------------------------------------------------

    def generate(self, request: request_pb2.Request) -> response_pb2.Response:
        self._verify_artifacts(request)
        context = self._context(request)
        s = request.sampling
        sampler = _Sampler(
            temperature=s.temperature if s.HasField("temperature") else 1.0,
            top_k=s.top_k if s.HasField("top_k") else 0,
            top_p=s.top_p if s.HasField("top_p") else 1.0,
            min_p=s.min_p if s.HasField("min_p") else 0.0,
        )
        max_tokens = s.max_output_tokens if s.HasField("max_output_tokens") else DEFAULT_MAX_OUTPUT_TOKENS
        seed = s.seed if s.HasField("seed") else 0
        response = response_pb2.Response(id=_response_id(request), model=self.model_id)
        output_tokens = reasoning_tokens = 0
        for index in range(max(1, s.choice_count)):
            gen = _Generator(context, sampler, seed + 1_000_003 * index, max_tokens)
            choice = self._generate_choice(request, gen, max_tokens)
            output_tokens += choice.output_tokens
            reasoning_tokens += choice.reasoning_tokens
            out = response.choices.add(
                index=index,
                finish_reason=choice.finish,
                raw_finish_reason=choice.raw_finish,
                stop_sequence=choice.stop_sequence,
            )
            out.message.role = content_pb2.ROLE_ASSISTANT
            out.message.parts.extend(choice.parts)
            if request.HasField("logprobs"):
                out.logprobs.CopyFrom(
                    _columns(choice.scored_prev, choice.scored_ids, request.logprobs.top_k, with_ids=True)
                )
        if request.HasField("input_scoring"):
            response.input_scores.CopyFrom(self._score_input(request, context))
        prompt_tokens = len(context) + len(_continuation(request))
        response.usage.input_token_count = prompt_tokens
        response.usage.output_token_count = output_tokens
        if request.HasField("reasoning"):
            response.usage.reasoning_token_count = reasoning_tokens
        return response

    def _generate_choice(self, request: request_pb2.Request, gen: _Generator, max_tokens: int) -> _Choice:
        choice = _Choice()
        stop = [x.encode() for x in request.sampling.stop]
        stop_ids = set(request.sampling.stop_token_ids)
        if max_tokens == 0:
            choice.finish, choice.raw_finish = response_pb2.FINISH_REASON_LENGTH, "length"
            choice.parts.append(content_pb2.Part(text=""))
            return choice

        if _wants_reasoning(request):
            self._reason(request, gen, choice)

        answer_start = len(gen.emitted)
        tool = _tool_to_call(request)
        kind = request.constraint.WhichOneof("kind")
        finish: int = response_pb2.FINISH_REASON_STOP
        raw, stop_seq = "eos", ""
        if tool is not None:
            ok = _emit_json(gen, orjson.loads(tool.parameters_json_schema or b'{"type":"object"}'))
            arguments = bytes(gen.emitted[answer_start:]).decode()
            call_id = "call_" + hashlib.sha256(f"{choice.output_tokens}:{arguments}".encode()).hexdigest()[:16]
            choice.parts.append(
                content_pb2.Part(tool_call=content_pb2.ToolCall(id=call_id, name=tool.name, arguments_json=arguments))
            )
            finish, raw = (
                (response_pb2.FINISH_REASON_TOOL_CALLS, "tool_calls")
                if ok
                else (
                    response_pb2.FINISH_REASON_LENGTH,
                    "length",
                )
            )
        else:
            if kind == "choice":
                labels = list(request.constraint.choice.labels)
                label = labels[_pick_sequence(gen, [x.encode() for x in labels])]
                if not gen.force(label.encode()):
                    finish, raw = response_pb2.FINISH_REASON_LENGTH, "length"
            elif kind == "json_schema":
                if not _emit_json(gen, orjson.loads(request.constraint.json_schema.schema_json)):
                    finish, raw = response_pb2.FINISH_REASON_LENGTH, "length"
            else:
                finish, raw, stop_seq = gen.free_text(gen.budget, stop, stop_ids)
            choice.parts.append(content_pb2.Part(text=bytes(gen.emitted[answer_start:]).decode("utf-8")))
        choice.scored_prev = gen.prevs[answer_start:]
        choice.scored_ids = gen.emitted[answer_start:]
        choice.output_tokens = max_tokens - gen.budget
        choice.finish, choice.raw_finish, choice.stop_sequence = finish, raw, stop_seq
        return choice

    def _reason(self, request: request_pb2.Request, gen: _Generator, choice: _Choice) -> None:
        controls = request.reasoning
        if controls.WhichOneof("amount") == "budget_tokens":
            length = controls.budget_tokens
        else:
            length = _REASONING_LENGTH.get(controls.effort, _REASONING_LENGTH[request_pb2.REASONING_EFFORT_LOW])
        gen.force(b"<think>")
        start = len(gen.emitted)
        gen.sample_class(_LETTERS, min(length, max(0, gen.budget - 8)))
        thought = bytes(gen.emitted[start:]).decode()
        gen.force(b"</think>")
        choice.reasoning_tokens = len(gen.emitted)
        reasoning = content_pb2.Reasoning()
        if controls.summary != request_pb2.REASONING_SUMMARY_UNSPECIFIED:
            reasoning.summary.append(thought[:40].strip())
        part = content_pb2.Part(reasoning=reasoning)
        issuer = content_pb2.Issuer(transport=self.name, model=self.model_id)
        if controls.include_thoughts:
            part.reasoning.text = thought
            part.artifacts.add(
                kind=content_pb2.REASONING_ARTIFACT_KIND_SIGNATURE, data=self._sign(thought), issuer=issuer
            )
        else:
            # Hidden reasoning travels sealed, like a provider's redacted thinking.
            sealed = base64.urlsafe_b64encode(thought.encode())
            part.artifacts.add(
                kind=content_pb2.REASONING_ARTIFACT_KIND_REDACTED_DATA,
                data=sealed + b"." + self._sign(sealed.decode()),
                issuer=issuer,
            )
        choice.parts.append(part)

    def _sign(self, text: str) -> bytes:
        mac = hmac.new(self._secret, f"{self.model_id}\x00{text}".encode(), hashlib.sha256)
        return mac.hexdigest().encode()

    def _unseal(self, artifact: content_pb2.ReasoningArtifact, part: content_pb2.Part) -> str | None:
        """The reasoning text an artifact vouches for, or None when it fails its check."""
        if artifact.kind == content_pb2.REASONING_ARTIFACT_KIND_SIGNATURE:
            text = part.reasoning.text
            return text if hmac.compare_digest(artifact.data, self._sign(text)) else None
        if artifact.kind == content_pb2.REASONING_ARTIFACT_KIND_REDACTED_DATA:
            sealed, _, mac = artifact.data.partition(b".")
            if not hmac.compare_digest(mac, self._sign(sealed.decode("ascii", "replace"))):
                return None
            return base64.urlsafe_b64decode(sealed).decode()
        return None

    def _verify_artifacts(self, request: request_pb2.Request) -> None:
        """Reject replayed reasoning whose artifact this model did not issue or that was altered."""
        if request.WhichOneof("input") != "conversation":
            return
        for i, message in enumerate(request.conversation.messages):
            for j, part in enumerate(message.parts):
                if part.WhichOneof("content") == "reasoning" and not part.artifacts:
                    raise errors.ForeignArtifactError(
                        f"messages[{i}].parts[{j}]: the reference model only accepts reasoning with the "
                        "artifact it issued"
                    )
                for artifact in part.artifacts:
                    if self._unseal(artifact, part) is None:
                        raise errors.ForeignArtifactError(
                            f"messages[{i}].parts[{j}]: the reasoning artifact fails its signature check "
                            "(tampered, or issued under another key)"
                        )

    # ---- prompts and scoring -----------------------------------------------------------------------

    def _context(self, request: request_pb2.Request) -> list[int]:
        kind = request.WhichOneof("input")
        if kind == "prompt":
            return [BOS, *_ids(request.prompt)]
        if kind == "token_ids":
            return list(request.token_ids.ids)
        return [BOS, *_ids(self._render(request))]

    def _render(self, request: request_pb2.Request) -> str:
        """The chat template: `<|role|>` headers, reasoning in `<think>`, tool traffic as tagged JSON."""
        out = []
        if request.tools:
            declared = [
                {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
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
                elif kind == "reasoning":
                    text = part.reasoning.text
                    for artifact in part.artifacts:
                        text = self._unseal(artifact, part) or text
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

    def _score_input(self, request: request_pb2.Request, context: list[int]) -> logprobs_pb2.InputScores:
        continuation = _continuation(request)
        ids = context + continuation
        if continuation:
            first, unscored = len(context), 0
        else:
            first, unscored = 1, 1  # the first token has no logprob: never scored as zero
        prev, scored = ids[first - 1 : -1], ids[first:]
        tokens = _columns(prev, scored, request.input_scoring.top_k, with_ids=True)
        token_bytes = tokens.token_bytes
        scores = logprobs_pb2.InputScores(
            tokens=tokens,
            logprob_sum=float(logprob_table()[prev, scored].sum()),
            token_count=len(scored),
            byte_count=len(token_bytes),
            char_count=int(np.count_nonzero((np.frombuffer(token_bytes, np.uint8) & 0xC0) != 0x80)),
            unscored_token_count=unscored,
            span_start_byte=int(_PIECE_LEN[ids[:first]].sum()),
        )
        return scores


# ---- helpers -----------------------------------------------------------------------------------------


def _response_id(request: request_pb2.Request) -> str:
    return "ref-" + hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()[:24]


def _continuation(request: request_pb2.Request) -> list[int]:
    if not request.HasField("input_scoring"):
        return []
    span = request.input_scoring.WhichOneof("continuation")
    if span == "continuation_text":
        return _ids(request.input_scoring.continuation_text)
    if span == "continuation_tokens":
        return list(request.input_scoring.continuation_tokens.ids)
    return []


def _columns(prev: list[int], ids: list[int], top_k: int, *, with_ids: bool) -> logprobs_pb2.TokenLogprobs:
    """Columnar logprobs of `ids`, each after its `prev`, gathered from the table in one go."""
    out = logprobs_pb2.TokenLogprobs(basis=logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING)
    prev_arr = np.asarray(prev, dtype=np.int64)
    id_arr = np.asarray(ids, dtype=np.int64)
    if with_ids:
        out.token_ids.extend(ids)
    out.logprobs.extend(logprob_table()[prev_arr, id_arr].tolist())
    out.tokens.extend([PIECES[i] for i in ids])
    out.token_bytes = bytes(id_arr[id_arr < 256].astype(np.uint8))
    out.token_byte_offsets.extend(_offsets(id_arr))
    if top_k:
        top_ids, top_lps = _top_table()
        flat_ids = top_ids[prev_arr, :top_k].ravel()
        out.top_counts.extend([top_k] * len(ids))
        if with_ids:
            out.top_token_ids.extend(flat_ids.tolist())
        out.top_logprobs.extend(top_lps[prev_arr, :top_k].ravel().tolist())
        out.top_tokens.extend([PIECES[i] for i in flat_ids.tolist()])
        out.top_token_bytes = bytes(flat_ids[flat_ids < 256].astype(np.uint8))
        out.top_token_byte_offsets.extend(_offsets(flat_ids))
    return out


def _offsets(ids: np.ndarray) -> list[int]:
    lengths = _PIECE_LEN[ids]
    return (np.cumsum(lengths) - lengths).tolist()


def _wants_reasoning(request: request_pb2.Request) -> bool:
    if not request.HasField("reasoning"):
        return False
    controls = request.reasoning
    return not (controls.WhichOneof("amount") == "effort" and controls.effort == request_pb2.REASONING_EFFORT_NONE)


def _may_call_tools(request: request_pb2.Request) -> bool:
    choice = request.tool_choice
    return bool(request.tools) and not (
        choice.WhichOneof("choice") == "mode" and choice.mode == request_pb2.TOOL_CHOICE_MODE_NONE
    )


def _tool_to_call(request: request_pb2.Request) -> request_pb2.Tool | None:
    """Which tool to call: the named one; under REQUIRED, the first; under AUTO, one the user just named."""
    if not _may_call_tools(request):
        return None
    choice = request.tool_choice
    if choice.WhichOneof("choice") == "tool_name":
        return next(t for t in request.tools if t.name == choice.tool_name)
    if choice.WhichOneof("choice") == "mode" and choice.mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED:
        return request.tools[0]
    if request.WhichOneof("input") == "conversation" and request.conversation.messages:
        last = request.conversation.messages[-1]
        if last.role == content_pb2.ROLE_USER:
            text = "".join(p.text for p in last.parts if p.WhichOneof("content") == "text")
            for tool in request.tools:
                if tool.name in text:
                    return tool
    return None


def _pick_sequence(gen: _Generator, options: list[bytes]) -> int:
    """Choose among byte sequences by their total logprob under the model (sampled, or argmax at T=0)."""
    table = gen.table
    scores = np.array(
        [table[[gen.prev, *o[:-1]], list(o)].sum() for o in options],
        dtype=np.float64,
    )
    if gen.sampler.temperature == 0:
        return int(np.argmax(scores))
    weights = np.exp((scores - scores.max()) / gen.sampler.temperature)
    return int(gen.rng.choice(len(options), p=weights / weights.sum()))


def _emit_json(gen: _Generator, schema: dict) -> bool:
    """Emit a JSON value that satisfies `schema` (the subset `_schema_gaps` accepts). False if cut short."""
    if "const" in schema:
        return gen.force(orjson.dumps(schema["const"]))
    if "enum" in schema:
        options = [orjson.dumps(v) for v in schema["enum"]]
        return gen.force(options[_pick_sequence(gen, options)])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[_pick_sequence(gen, [k.encode() for k in kind])]
    if kind == "object":
        if not gen.force(b"{"):
            return False
        for n, (name, sub) in enumerate(schema.get("properties", {}).items()):
            if not gen.force((b"," if n else b"") + orjson.dumps(name) + b":") or not _emit_json(gen, sub):
                return False
        return gen.force(b"}")
    if kind == "array":
        low = schema.get("minItems", 1)
        high = max(low, min(schema.get("maxItems", 3), low + 2))
        count = int(gen.rng.integers(low, high + 1))
        if not gen.force(b"["):
            return False
        for n in range(count):
            if (n and not gen.force(b",")) or not _emit_json(gen, schema.get("items", {"type": "string"})):
                return False
        return gen.force(b"]")
    if kind == "string":
        return gen.force(b'"') and gen.sample_class(_LETTERS[:-1], 1 + int(gen.rng.integers(0, 8))) and gen.force(b'"')
    if kind in ("integer", "number"):
        ok = gen.sample_class(_NONZERO_DIGITS, 1) and gen.sample_class(_DIGITS, int(gen.rng.integers(0, 3)))
        if ok and kind == "number":
            ok = gen.force(b".") and gen.sample_class(_DIGITS, 1)
        return ok
    if kind == "boolean":
        options = [b"true", b"false"]
        return gen.force(options[_pick_sequence(gen, options)])
    return gen.force(b"null")


def _schema_gaps(schema_json: str, where: str) -> list[str]:
    """Reasons the reference model cannot honour a JSON schema (keywords or types it does not implement)."""
    try:
        schema = orjson.loads(schema_json)
    except orjson.JSONDecodeError:
        return []  # field validation reports it
    unknown: set[str] = set()

    def walk(node: object) -> None:
        if not isinstance(node, dict):
            unknown.add("(a schema that is not an object)")
            return
        unknown.update(k for k in node if k not in _SUPPORTED_SCHEMA_KEYS)
        kinds = node.get("type", "object")
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if kind not in _SCHEMA_TYPES:
                unknown.add(f"type {kind!r}")
        if node.get("additionalProperties", False) not in (False,):
            unknown.add("additionalProperties other than false")
        for sub in node.get("properties", {}).values():
            walk(sub)
        if "items" in node:
            walk(node["items"])

    walk(schema)
    if not unknown:
        return []
    return [f"The reference model cannot honour {', '.join(sorted(unknown))} in {where}."]
