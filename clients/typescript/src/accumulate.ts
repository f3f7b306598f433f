// Folds StreamGenerate events into the Response the same request gives unary, by the accumulation rules in the
// comment of `StreamEvent` (stream.proto), which are normative; each rule's line is quoted where it is applied.
import { clone, create } from "@bufbuild/protobuf";
import {
  MessagePhase,
  MessageSchema,
  PartSchema,
  ReasoningSchema,
  Role,
  ToolCallSchema,
  type Part,
} from "./gen/modelir/v1/content_pb";
import { TokenLogprobsSchema, type TokenLogprobs } from "./gen/modelir/v1/logprobs_pb";
import { ChoiceSchema, ResponseSchema, SampledTokensSchema, type Response } from "./gen/modelir/v1/response_pb";
import type { ChoiceFinish, PartDelta, StreamEnd, StreamEvent } from "./gen/modelir/v1/stream_pb";

interface ChoiceBuffer {
  parts: Part[];
  logprobs: TokenLogprobs[];
  tokenIds: number[];
  partIndexes: number[];
  finish?: ChoiceFinish;
  phase?: MessagePhase;
}

/** The part index of a token of no part (a finish's unattributed tokens, a delta's with `part_index` -1). */
const NO_PART = -1;

/** `target.push(...source)` without spreading: a spread of a few hundred thousand items (32k tokens with top-20
 * alternatives in one chunk) overflows V8's stack. */
function append<T>(target: T[], source: readonly T[], map?: (item: T) => T): void {
  for (const item of source) target.push(map ? map(item) : item);
}

function joinBytes(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * Consecutive logprob chunks (stream deltas) as one `TokenLogprobs`: columns concatenated in arrival order, byte
 * offsets rebased by the bytes that came before, the basis of the first chunk that has one.
 */
export function concatLogprobs(chunks: TokenLogprobs[]): TokenLogprobs {
  const out = create(TokenLogprobsSchema);
  let base = 0;
  let topBase = 0;
  for (const c of chunks) {
    if (!out.basis) out.basis = c.basis;
    const [shift, topShift] = [base, topBase];
    append(out.tokenIds, c.tokenIds);
    append(out.tokenLogprobs, c.tokenLogprobs);
    append(out.tokens, c.tokens);
    append(out.tokenByteOffsets, c.tokenByteOffsets, (o) => o + shift);
    base += c.tokenBytes.length;
    append(out.topCounts, c.topCounts);
    append(out.topTokenIds, c.topTokenIds);
    append(out.topLogprobs, c.topLogprobs);
    append(out.topTokens, c.topTokens);
    append(out.topTokenByteOffsets, c.topTokenByteOffsets, (o) => o + topShift);
    topBase += c.topTokenBytes.length;
  }
  out.tokenBytes = joinBytes(chunks.map((c) => c.tokenBytes));
  out.topTokenBytes = joinBytes(chunks.map((c) => c.topTokenBytes));
  return out;
}

// "A delta's `token_ids` are appended to the choice's `sampled_tokens.token_ids`, each with the delta's `part_index`
// as its part index"
function addTokens(choice: ChoiceBuffer, ids: readonly number[], partIndex: number): void {
  append(choice.tokenIds, ids);
  for (let i = 0; i < ids.length; i++) choice.partIndexes.push(partIndex);
}

/** A stream that breaks the accumulation rules (a delta that skips a part). */
export class StreamOrderError extends Error {}

export class StreamAccumulator {
  private readonly response: Response = create(ResponseSchema);
  private readonly choices = new Map<number, ChoiceBuffer>();
  /** True once the end event arrived. */
  ended = false;

  private choice(index: number): ChoiceBuffer {
    let buffer = this.choices.get(index);
    if (!buffer) this.choices.set(index, (buffer = { parts: [], logprobs: [], tokenIds: [], partIndexes: [] }));
    return buffer;
  }

  add(event: StreamEvent): this {
    const e = event.event;
    if (e.case === "start") {
      // "`start` sets the response's id and model, and its warnings"
      this.response.id = e.value.id;
      this.response.model = e.value.model;
      this.response.warnings.push(...e.value.warnings);
    } else if (e.case === "delta") {
      this.addDelta(e.value);
    } else if (e.case === "end") {
      this.addEnd(e.value);
    }
    // "`part_done` changes nothing in the response"
    return this;
  }

  private addDelta(delta: PartDelta): void {
    const choice = this.choice(delta.choiceIndex);
    // "The phase of the choice's message, on any delta once it is known; a later delta's phase replaces an
    // earlier one. Unspecified on deltas that do not say." (IR 1.1)
    if (delta.phase !== MessagePhase.UNSPECIFIED) choice.phase = delta.phase;
    if (delta.logprobs) choice.logprobs.push(delta.logprobs);
    const content = delta.content;
    // "A delta with no content, artifacts, citations or item id only carries logprobs or token ids and starts no
    // part; its `part_index` may then be -1 (token ids of no part)."
    if (content.case === undefined && !delta.artifacts.length && !delta.citations.length && !delta.itemId) {
      addTokens(choice, delta.tokenIds, Math.max(delta.partIndex, NO_PART));
      return;
    }
    if (delta.partIndex === choice.parts.length) choice.parts.push(create(PartSchema));
    else if (delta.partIndex > choice.parts.length || delta.partIndex < 0) {
      throw new StreamOrderError(
        `stream delta skips to part ${delta.partIndex} of ${choice.parts.length} (choice ${delta.choiceIndex})`,
      );
    }
    const part = choice.parts[delta.partIndex]!;
    switch (content.case) {
      case "text": {
        const before = part.content.case === "text" ? part.content.value : "";
        part.content = { case: "text", value: before + content.value };
        break;
      }
      case "refusal": {
        const before = part.content.case === "refusal" ? part.content.value : "";
        part.content = { case: "refusal", value: before + content.value };
        break;
      }
      case "reasoning": {
        if (part.content.case !== "reasoning") part.content = { case: "reasoning", value: create(ReasoningSchema) };
        const reasoning = part.content.value;
        reasoning.text += content.value.text;
        if (content.value.summaryText !== undefined) {
          while (reasoning.summary.length <= content.value.summaryIndex) reasoning.summary.push("");
          reasoning.summary[content.value.summaryIndex] += content.value.summaryText;
        }
        break;
      }
      case "toolCall": {
        if (part.content.case !== "toolCall") part.content = { case: "toolCall", value: create(ToolCallSchema) };
        const call = part.content.value;
        if (content.value.id) call.id = content.value.id;
        if (content.value.name) call.name = content.value.name;
        call.argumentsJson += content.value.argumentsJson;
        break;
      }
      case "blob":
        part.content = { case: "blob", value: content.value };
        break;
      case "part": {
        // "a whole `part` replaces the part's content (and a whole part's artifacts, item id and citations are
        // appended to the part's)"; as Python's fold, a whole part without content keeps the part's, and its
        // provider options and cache breakpoint travel too
        const whole = clone(PartSchema, content.value); // later deltas may extend it: never alias the event
        if (whole.content.case !== undefined) part.content = whole.content;
        part.artifacts.push(...whole.artifacts);
        if (whole.itemId) part.itemId = whole.itemId;
        part.citations.push(...whole.citations);
        part.providerOptions.push(...whole.providerOptions);
        if (whole.cacheBreakpoint) part.cacheBreakpoint = whole.cacheBreakpoint;
        break;
      }
    }
    part.artifacts.push(...delta.artifacts);
    part.citations.push(...delta.citations);
    if (delta.itemId) part.itemId = delta.itemId;
    addTokens(choice, delta.tokenIds, delta.partIndex);
  }

  private addEnd(end: StreamEnd): void {
    this.ended = true;
    const r = this.response;
    // "a non-empty `id` or `model` on `end` replaces them"
    if (end.id) r.id = end.id;
    if (end.model) r.model = end.model;
    for (const finish of end.finishes) this.choice(finish.choiceIndex).finish = finish;
    // "its values are set on the response (its warnings are appended after the start's)"
    r.usage = end.usage;
    r.inputScores = [...end.inputScores];
    r.promptTokenIds = [...end.promptTokenIds];
    r.timing = end.timing;
    r.errors = [...end.errors];
    r.warnings.push(...end.warnings);
    r.raw = end.raw;
    r.promptFeedback = end.promptFeedback;
    r.serviceTier = end.serviceTier;
  }

  /** The accumulated response; before the end event it holds the partial output. */
  result(): Response {
    const out = clone(ResponseSchema, this.response);
    out.choices = [...this.choices.keys()].sort((a, b) => a - b).map((index) => {
      const buffer = this.choices.get(index)!;
      const finish = buffer.finish;
      // "a finish's `unattributed_token_ids` are appended last, with -1"
      const tokenIds = [...buffer.tokenIds, ...(finish?.unattributedTokenIds ?? [])];
      const partIndexes = [...buffer.partIndexes, ...(finish?.unattributedTokenIds ?? []).map(() => NO_PART)];
      return create(ChoiceSchema, {
        index,
        message: create(MessageSchema, {
          role: Role.ASSISTANT,
          parts: buffer.parts.map((p) => clone(PartSchema, p)),
          phase: buffer.phase,
        }),
        finishReason: finish?.finishReason,
        rawFinishReason: finish?.rawFinishReason,
        stop: finish ? { ...finish.stop } : undefined,
        logprobs: buffer.logprobs.length ? concatLogprobs(buffer.logprobs) : undefined,
        // "When no token has a part index of 0 or more, `sampled_tokens.part_indexes` stays empty"
        sampledTokens: tokenIds.length
          ? create(SampledTokensSchema, { tokenIds, partIndexes: partIndexes.some((i) => i >= 0) ? partIndexes : [] })
          : undefined,
        outputTokenCount: finish?.outputTokenCount,
        constrainedLabel: finish?.constrainedLabel,
        nativeJson: finish?.nativeJson, // (IR 1.1)
      });
    });
    return out;
  }
}

/** Every event of a stream folded into one response. */
export async function accumulate(events: AsyncIterable<StreamEvent> | Iterable<StreamEvent>): Promise<Response> {
  const acc = new StreamAccumulator();
  for await (const event of events) acc.add(event);
  return acc.result();
}
