// The trajectory conformance vectors (conformance/trajectories, written by its write_vectors.py): every file read
// with trajectoryFromRecords and compared with expected.json, and the rule's refusals.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import {
  ResponseSchema,
  TrajectoryDriftError,
  TrajectoryError,
  trajectory,
  trajectoryFromRecords,
  type Response,
} from "../src/index";

const VECTORS = resolve(dirname(fileURLToPath(import.meta.url)), "../../../conformance/trajectories");

interface Entry {
  path: string;
  trajectory?: {
    tokens: number[];
    loss_mask: number[];
    logprobs: (number | null)[];
    turns: { prompt_start: number; sampled_start: number; end: number }[];
  };
  error?: { turn: number; position: number; expected: number; found: number };
}

const manifest: { files: Entry[] } = JSON.parse(readFileSync(join(VECTORS, "expected.json"), "utf8"));
for (const entry of manifest.files) {
  test(`trajectory vector ${entry.path}`, () => {
    const path = join(VECTORS, entry.path);
    if (entry.error) {
      assert.throws(
        () => trajectoryFromRecords(path),
        (error: unknown) => {
          assert.ok(error instanceof TrajectoryDriftError);
          const { turn, position, expected, found } = error;
          assert.deepEqual({ turn, position, expected, found }, entry.error);
          return true;
        },
      );
      return;
    }
    const want = entry.trajectory!;
    const got = trajectoryFromRecords(path);
    assert.deepEqual([...got.tokens], want.tokens);
    assert.deepEqual([...got.lossMask], want.loss_mask);
    // Logprobs are float32 on both sides; null is NaN.
    assert.deepEqual(
      [...got.logprobs].map((x) => (Number.isNaN(x) ? null : x)),
      want.logprobs.map((x) => (x === null ? null : Math.fround(x))),
    );
    assert.deepEqual(
      got.turns,
      want.turns.map((t) => ({ promptStart: t.prompt_start, sampledStart: t.sampled_start, end: t.end })),
    );
  });
}

function turn(prompt: number[], sampled: number[]): Response {
  return create(ResponseSchema, { promptTokenIds: prompt, choices: [{ sampledTokens: { tokenIds: sampled } }] });
}

test("a prompt shorter than the sequence is refused where it ends; a turn without prompt ids is refused", () => {
  assert.throws(
    () => trajectory([turn([1, 2], [3, 4]), turn([1, 2, 3], [6])]),
    (error: unknown) =>
      error instanceof TrajectoryDriftError && error.turn === 1 && error.position === 3 && error.found === -1,
  );
  assert.throws(
    () => trajectory([turn([1], [2]), turn([], [3])]),
    (error: unknown) => error instanceof TrajectoryError && /^turn 1: .*prompt_token_ids/.test(error.message),
  );
});
