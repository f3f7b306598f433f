// Reading a Response the way the Python SDK does: text, refusals, tool calls, reasoning, logprobs and sampled tokens
// as typed arrays.
import type { Choice, Response } from "./gen/modelir/v1/response_pb";
import type { ToolCall } from "./gen/modelir/v1/content_pb";
import type { TokenLogprobs } from "./gen/modelir/v1/logprobs_pb";

/** Columnar logprobs as typed arrays (cheap for 32k tokens with top-20 alternatives). */
export interface LogprobColumns {
  tokenIds: Int32Array;
  logprobs: Float32Array;
  tokens: string[];
  /** Each token's raw bytes (a view into one buffer). */
  tokenBytes: Uint8Array[];
  topCounts: Uint32Array;
  topTokenIds: Int32Array;
  topLogprobs: Float32Array;
  topTokens: string[];
}

function slices(bytes: Uint8Array, offsets: readonly number[]): Uint8Array[] {
  return offsets.map((start, i) => bytes.subarray(start, i + 1 < offsets.length ? offsets[i + 1] : bytes.length));
}

/** A choice's (or any) `TokenLogprobs` as typed arrays. */
export function logprobColumns(logprobs: TokenLogprobs | undefined): LogprobColumns {
  return {
    tokenIds: Int32Array.from(logprobs?.tokenIds ?? []),
    logprobs: Float32Array.from(logprobs?.tokenLogprobs ?? []),
    tokens: [...(logprobs?.tokens ?? [])],
    tokenBytes: logprobs ? slices(logprobs.tokenBytes, logprobs.tokenByteOffsets) : [],
    topCounts: Uint32Array.from(logprobs?.topCounts ?? []),
    topTokenIds: Int32Array.from(logprobs?.topTokenIds ?? []),
    topLogprobs: Float32Array.from(logprobs?.topLogprobs ?? []),
    topTokens: [...(logprobs?.topTokens ?? [])],
  };
}

/** A choice's sampled tokens as typed arrays: the ids, and the index of the message part each belongs to (-1 for
 * none, such as a trimmed stop token; empty when the provider cannot attribute tokens to parts). */
export interface SampledTokenColumns {
  tokenIds: Int32Array;
  partIndexes: Int32Array;
}

/** One choice of a response, with the accessors. */
export class ChoiceView {
  constructor(readonly choice: Choice) {}

  /** Every text part, joined in order. */
  get text(): string {
    return this.choice.message?.parts.map((p) => (p.content.case === "text" ? p.content.value : "")).join("") ?? "";
  }

  /** Every refusal part, joined in order (empty when the model did not refuse). */
  get refusal(): string {
    return this.choice.message?.parts.map((p) => (p.content.case === "refusal" ? p.content.value : "")).join("") ?? "";
  }

  /** The tool calls, in the order the model made them. */
  get toolCalls(): ToolCall[] {
    return this.choice.message?.parts.flatMap((p) => (p.content.case === "toolCall" ? [p.content.value] : [])) ?? [];
  }

  /** The visible reasoning text of every reasoning part, joined in order. */
  get reasoning(): string {
    return (
      this.choice.message?.parts.map((p) => (p.content.case === "reasoning" ? p.content.value.text : "")).join("") ?? ""
    );
  }

  /** The sampled tokens' logprobs as typed arrays (empty when none were asked for). */
  get logprobs(): LogprobColumns {
    return logprobColumns(this.choice.logprobs);
  }

  /** The sampled token ids with their parts (whether or not logprobs were asked for), as typed arrays. */
  get sampledTokens(): SampledTokenColumns {
    return {
      tokenIds: Int32Array.from(this.choice.sampledTokens?.tokenIds ?? []),
      partIndexes: Int32Array.from(this.choice.sampledTokens?.partIndexes ?? []),
    };
  }

  /** The sampled text rebuilt from the token bytes (never by joining token strings). */
  get textFromBytes(): string {
    return new TextDecoder().decode(this.choice.logprobs?.tokenBytes ?? new Uint8Array());
  }
}

/** A response with accessors for its first choice (`choices[i]` for the others). */
export class Completion {
  readonly choices: ChoiceView[];
  constructor(readonly response: Response) {
    this.choices = response.choices.map((c) => new ChoiceView(c));
  }
  private get first(): ChoiceView {
    const first = this.choices[0];
    if (!first) throw new Error("the response has no choices");
    return first;
  }
  get text(): string {
    return this.first.text;
  }
  get refusal(): string {
    return this.first.refusal;
  }
  get toolCalls(): ToolCall[] {
    return this.first.toolCalls;
  }
  get sampledTokens(): SampledTokenColumns {
    return this.first.sampledTokens;
  }
  get reasoning(): string {
    return this.first.reasoning;
  }
  get logprobs(): LogprobColumns {
    return this.first.logprobs;
  }
}
