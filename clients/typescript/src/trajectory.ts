// The trajectory of a multi-turn rollout, as an RL trainer consumes it: the whole token sequence, the loss mask, the
// sampled tokens' logprobs aligned to it and each turn's boundaries, by the rule in the comment of
// `Response.prompt_token_ids` (proto/modelir/v1/response.proto, normative; the Python, Go and Rust SDKs implement
// the same rule, and conformance/trajectories holds the vector they all agree on).
import type { Record as RecordMessage } from "./gen/modelir/v1/record_pb";
import type { Choice, Response } from "./gen/modelir/v1/response_pb";
import { openRecords } from "./records";

/** Where one turn sits in the sequence: its new prompt tokens are `[promptStart, sampledStart)`, its sampled tokens
 * `[sampledStart, end)`. */
export interface TurnBoundary {
  promptStart: number;
  sampledStart: number;
  end: number;
}

/** A rollout's tokens, one entry per position: `lossMask` is 1 where the model sampled the token, `logprobs` the
 * sampled token's logprob (NaN where the token was not sampled or its logprob was not reported). */
export interface Trajectory {
  tokens: Int32Array;
  lossMask: Uint8Array;
  logprobs: Float32Array;
  turns: TurnBoundary[];
}

/** A rollout that has no trajectory by the rule: `turn` (from 0) broke it, `reason` says how. */
export class TrajectoryError extends Error {
  constructor(
    readonly turn: number,
    readonly reason: string,
  ) {
    super(`turn ${turn}: ${reason}`);
    this.name = "TrajectoryError";
  }
}

/** Turn `turn`'s prompt does not extend the earlier turns: at `position` the sequence has `expected` and the prompt
 * has `found` (-1 where the prompt ended first). */
export class TrajectoryDriftError extends TrajectoryError {
  constructor(
    turn: number,
    readonly position: number,
    readonly expected: number,
    readonly found: number,
  ) {
    const seen = found >= 0 ? `has ${found}` : "ends there";
    super(
      turn,
      `its prompt does not extend the earlier turns (re-tokenization drift): at position ${position} the sequence has token ${expected}, the prompt ${seen}`,
    );
    this.name = "TrajectoryDriftError";
  }
}

/** The trajectory of a rollout given as its responses, in the order they were made. Throws `TrajectoryError` (or
 * `TrajectoryDriftError` for a prompt that does not extend the earlier turns). */
export function trajectory(responses: Iterable<Response>): Trajectory {
  const turns = [...responses].map((response, i) => turnOf(i, response));
  // A rollout whose prompts extend each other ends where its longest turn ends: allocate that once, keep `[0, end)`.
  const room = turns.reduce((most, [prompt, sampled]) => Math.max(most, prompt.length + sampled.length), 0);
  const tokens = new Int32Array(room);
  const lossMask = new Uint8Array(room);
  const logprobs = new Float32Array(room).fill(NaN);
  const boundaries: TurnBoundary[] = [];
  let end = 0;
  turns.forEach(([prompt, sampled, choice], i) => {
    const shared = Math.min(end, prompt.length);
    for (let at = 0; at < shared; at++) {
      if (prompt[at] !== tokens[at]) throw new TrajectoryDriftError(i, at, tokens[at]!, prompt[at]!);
    }
    if (prompt.length < end) throw new TrajectoryDriftError(i, prompt.length, tokens[prompt.length]!, -1);
    const sampledStart = prompt.length;
    tokens.set(prompt.slice(end), end);
    tokens.set(sampled, sampledStart);
    lossMask.fill(1, sampledStart, sampledStart + sampled.length);
    logprobs.set(scoredLogprobs(i, choice, sampled), sampledStart);
    boundaries.push({ promptStart: end, sampledStart, end: sampledStart + sampled.length });
    end = sampledStart + sampled.length;
  });
  return {
    tokens: tokens.subarray(0, end),
    lossMask: lossMask.subarray(0, end),
    logprobs: logprobs.subarray(0, end),
    turns: boundaries,
  };
}

/** The trajectory of a rollout given as its record file (either format, read with `openRecords`) or its records:
 * every record, in order, is one turn; a record without a response is refused. */
export function trajectoryFromRecords(source: string | Iterable<RecordMessage>): Trajectory {
  const records = typeof source === "string" ? openRecords(source).records() : source;
  return trajectory(responsesOf(records));
}

function* responsesOf(records: Iterable<RecordMessage>): Generator<Response> {
  let i = 0;
  for (const record of records) {
    if (!record.response) {
      const kind = record.embedRequest ? "an Embed call" : "a call that returned no response";
      throw new TrajectoryError(i, `record '${record.key}' is of ${kind}: a rollout's turns all have responses`);
    }
    yield record.response;
    i++;
  }
}

function turnOf(i: number, response: Response): [number[], number[], Choice] {
  const choice = response.choices[0];
  if (!choice) throw new TrajectoryError(i, "the response has no choice to continue");
  if (response.promptTokenIds.length === 0) {
    throw new TrajectoryError(i, "the response does not say which prompt token ids the engine saw (prompt_token_ids)");
  }
  const sampled = choice.sampledTokens?.tokenIds ?? [];
  if (sampled.length === 0) throw new TrajectoryError(i, "its first choice has no sampled token ids (sampled_tokens)");
  return [response.promptTokenIds, sampled, choice];
}

function scoredLogprobs(i: number, choice: Choice, sampled: number[]): number[] {
  const scored = choice.logprobs?.tokenLogprobs ?? [];
  if (scored.length > sampled.length) {
    throw new TrajectoryError(i, `it has ${scored.length} logprobs for ${sampled.length} sampled tokens`);
  }
  const ids = choice.logprobs?.tokenIds ?? [];
  if (ids.length > 0 && ids.some((id, at) => id !== sampled[at])) {
    throw new TrajectoryError(i, "its logprobs' token ids are not the first of its sampled token ids");
  }
  return scored;
}
