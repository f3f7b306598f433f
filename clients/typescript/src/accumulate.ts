// Folds StreamGenerate events into the Response the same request gives unary, by the rules of stream.proto:
// parts start when a delta's part_index is one past the last; text, reasoning and tool-call arguments append;
// logprob chunks concatenate with their byte offsets rebased; the basis comes from the first chunk; the role is
// assistant; the end event's id and model replace the start's.
import { create } from "@bufbuild/protobuf";
import { MessageSchema, PartSchema, ReasoningSchema, Role, ToolCallSchema, type Part } from "./gen/modelir/v1/content_pb";
import { TokenLogprobsSchema, type TokenLogprobs } from "./gen/modelir/v1/logprobs_pb";
import { ChoiceSchema, ResponseSchema, type Response } from "./gen/modelir/v1/response_pb";
import type { ChoiceFinish, StreamEvent } from "./gen/modelir/v1/stream_pb";

interface ChoiceBuffer {
  parts: Part[];
  logprobs: TokenLogprobs[];
  finish?: ChoiceFinish;
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

/** Consecutive logprob chunks (stream deltas) as one `TokenLogprobs`, byte offsets shifted. */
export function concatLogprobs(chunks: TokenLogprobs[]): TokenLogprobs {
  const out = create(TokenLogprobsSchema);
  let base = 0;
  let topBase = 0;
  for (const c of chunks) {
    if (!out.basis) out.basis = c.basis;
    out.tokenIds.push(...c.tokenIds);
    out.logprobs.push(...c.logprobs);
    out.tokens.push(...c.tokens);
    out.tokenByteOffsets.push(...c.tokenByteOffsets.map((o) => o + base));
    base += c.tokenBytes.length;
    out.topCounts.push(...c.topCounts);
    out.topTokenIds.push(...c.topTokenIds);
    out.topLogprobs.push(...c.topLogprobs);
    out.topTokens.push(...c.topTokens);
    out.topTokenByteOffsets.push(...c.topTokenByteOffsets.map((o) => o + topBase));
    topBase += c.topTokenBytes.length;
  }
  out.tokenBytes = joinBytes(chunks.map((c) => c.tokenBytes));
  out.topTokenBytes = joinBytes(chunks.map((c) => c.topTokenBytes));
  return out;
}

export class StreamAccumulator {
  private readonly response: Response = create(ResponseSchema);
  private readonly choices = new Map<number, ChoiceBuffer>();
  ended = false;

  private choice(index: number): ChoiceBuffer {
    let buffer = this.choices.get(index);
    if (!buffer) this.choices.set(index, (buffer = { parts: [], logprobs: [] }));
    return buffer;
  }

  add(event: StreamEvent): this {
    const e = event.event;
    if (e.case === "start") {
      this.response.id = e.value.id;
      this.response.model = e.value.model;
    } else if (e.case === "delta") {
      const delta = e.value;
      const choice = this.choice(delta.choiceIndex);
      if (delta.logprobs) choice.logprobs.push(delta.logprobs);
      const content = delta.content;
      if (content.case === undefined && !delta.artifacts.length && !delta.itemId) return this;
      if (delta.partIndex === choice.parts.length) choice.parts.push(create(PartSchema));
      else if (delta.partIndex > choice.parts.length) {
        throw new Error(`stream delta skips to part ${delta.partIndex} of ${choice.parts.length}`);
      }
      const part = choice.parts[delta.partIndex]!;
      if (content.case === "text") {
        const before = part.content.case === "text" ? part.content.value : "";
        part.content = { case: "text", value: before + content.value };
      } else if (content.case === "reasoning") {
        if (part.content.case !== "reasoning") part.content = { case: "reasoning", value: create(ReasoningSchema) };
        const reasoning = part.content.value;
        reasoning.text += content.value.text;
        if (content.value.summaryText !== undefined) {
          while (reasoning.summary.length <= content.value.summaryIndex) reasoning.summary.push("");
          reasoning.summary[content.value.summaryIndex] += content.value.summaryText;
        }
      } else if (content.case === "toolCall") {
        if (part.content.case !== "toolCall") part.content = { case: "toolCall", value: create(ToolCallSchema) };
        const call = part.content.value;
        if (content.value.id) call.id = content.value.id;
        if (content.value.name) call.name = content.value.name;
        call.argumentsJson += content.value.argumentsJson;
      } else if (content.case === "blob") {
        part.content = { case: "blob", value: content.value };
      }
      part.artifacts.push(...delta.artifacts);
      if (delta.itemId) part.itemId = delta.itemId;
    } else if (e.case === "end") {
      const end = e.value;
      this.ended = true;
      const r = this.response;
      if (end.id) r.id = end.id;
      if (end.model) r.model = end.model;
      for (const finish of end.finishes) this.choice(finish.choiceIndex).finish = finish;
      if (end.usage) r.usage = end.usage;
      if (end.inputScores) r.inputScores = end.inputScores;
      r.promptTokenIds.push(...end.promptTokenIds);
      if (end.timing) r.timing = end.timing;
      if (end.error) r.error = end.error;
      r.warnings.push(...end.warnings);
      if (end.raw) r.raw = end.raw;
    }
    return this;
  }

  /** The accumulated response; before the end event it holds the partial output. */
  result(): Response {
    const out = create(ResponseSchema, this.response);
    out.choices = [...this.choices.keys()].sort((a, b) => a - b).map((index) => {
      const buffer = this.choices.get(index)!;
      return create(ChoiceSchema, {
        index,
        message: create(MessageSchema, { role: Role.ASSISTANT, parts: buffer.parts }),
        finishReason: buffer.finish?.finishReason,
        rawFinishReason: buffer.finish?.rawFinishReason,
        stopSequence: buffer.finish?.stopSequence,
        logprobs: buffer.logprobs.length ? concatLogprobs(buffer.logprobs) : undefined,
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
