// Unit tests of the TypeScript client: the IR version rule, typed errors, accessors, accumulation, comparison.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  accumulate,
  Capability,
  checkCompatible,
  Completion,
  fromRpcError,
  GetServerInfoResponseSchema,
  ModelirClient,
  IncompatibleServerError,
  InvalidRequestError,
  IR_VERSION,
  ModelirError,
  ResponseSchema,
  StreamAccumulator,
  StreamEventSchema,
  StreamOrderError,
  UnsupportedCapabilitiesSchema,
  UnsupportedCapabilityError,
  TokenLogprobsSchema,
} from "../src/index";
import { BadRequestSchema, ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb";
import { differences } from "./compare";

test("the IR version is read from the generated descriptor", () => {
  assert.match(IR_VERSION, /^\d+\.\d+\.\d+$/);
});

test("this client (IR 1.1) accepts a server of IR 1.0 or of a later 1.x, and refuses another major", () => {
  assert.equal(IR_VERSION, "1.1.0");
  for (const server of ["1.0.0", "1.1.0", "1.4.2"]) checkCompatible(server);
  for (const server of ["2.0.0", "0.9.0"]) assert.throws(() => checkCompatible(server), IncompatibleServerError);
});

test("a server of another major version is refused with a clear error, the same major is accepted", () => {
  checkCompatible("1.7.2", "1.0.0");
  assert.throws(() => checkCompatible("2.0.0", "1.0.0"), (e: unknown) => {
    assert.ok(e instanceof IncompatibleServerError);
    assert.match(e.message, /IR 2\.0\.0.*IR 1\.0\.0/);
    return true;
  });
  assert.throws(() => checkCompatible("", "1.0.0"), IncompatibleServerError);
});

test("connect() refuses a server that reports another IR major version, and closes its connection", async () => {
  let closed = false;
  class FutureServer extends ModelirClient {
    override async serverInfo() {
      return create(GetServerInfoResponseSchema, { irVersion: "2.0.0" });
    }
    override close() {
      closed = true;
      super.close();
    }
  }
  await assert.rejects(FutureServer.connect("http://127.0.0.1:9"), IncompatibleServerError);
  assert.ok(closed);
});

test("rich status details decode into typed errors", () => {
  const info = create(ErrorInfoSchema, { reason: "UNSUPPORTED_CAPABILITY", domain: "modelir.dev" });
  const gaps = create(UnsupportedCapabilitiesSchema, { model: "m", missing: [Capability.FIM] });
  const error = fromRpcError(
    new ConnectError("no fim", Code.FailedPrecondition, undefined, [
      { desc: ErrorInfoSchema, value: info },
      { desc: UnsupportedCapabilitiesSchema, value: gaps },
    ]),
  );
  assert.ok(error instanceof UnsupportedCapabilityError);
  assert.equal(error.codeName, "FAILED_PRECONDITION");
  assert.deepEqual(error.unsupported?.missing, [Capability.FIM]);

  const bad = fromRpcError(
    new ConnectError("bad", Code.InvalidArgument, undefined, [
      { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason: "INVALID_REQUEST", domain: "modelir.dev" }) },
      { desc: BadRequestSchema, value: create(BadRequestSchema, { fieldViolations: [{ field: "x", description: "y" }] }) },
    ]),
  );
  assert.ok(bad instanceof InvalidRequestError);
  assert.equal(bad.badRequest?.fieldViolations[0]?.field, "x");

  const bare = fromRpcError(new ConnectError("down", Code.Unavailable));
  assert.ok(bare instanceof ModelirError && !(bare instanceof InvalidRequestError));
  assert.equal((bare as ModelirError).reason, "UNAVAILABLE");
});

const logprobs = create(TokenLogprobsSchema, {
  tokenIds: [104, 195, 169],
  tokenLogprobs: [-0.5, -1.25, -0.125],
  tokens: ["h", "<0xC3>", "<0xA9>"],
  tokenBytes: new Uint8Array([104, 195, 169]),
  tokenByteOffsets: [0, 1, 2],
});

test("accessors give text, tool calls, reasoning and typed logprob arrays", () => {
  const response = create(ResponseSchema, {
    choices: [
      {
        message: {
          parts: [
            { content: { case: "reasoning", value: { text: "think" } } },
            { content: { case: "text", value: "hé" } },
            { content: { case: "toolCall", value: { id: "c1", name: "f", argumentsJson: "{}" } } },
          ],
        },
        logprobs,
      },
    ],
  });
  const completion = new Completion(response);
  assert.equal(completion.text, "hé");
  assert.equal(completion.reasoning, "think");
  assert.equal(completion.toolCalls[0]?.name, "f");
  assert.ok(completion.logprobs.tokenIds instanceof Int32Array);
  assert.ok(completion.logprobs.logprobs instanceof Float32Array);
  assert.deepEqual([...completion.logprobs.tokenIds], [104, 195, 169]);
  assert.deepEqual(completion.logprobs.tokenBytes.map((b) => [...b]), [[104], [195], [169]]);
  assert.equal(completion.choices[0]?.textFromBytes, "hé");
});

test("accumulation joins deltas, rebases logprob byte offsets per delta and lets the end event win", async () => {
  const first = create(TokenLogprobsSchema, { ...logprobs, tokenIds: [104], tokenLogprobs: [-0.5], tokens: ["h"], tokenBytes: new Uint8Array([104]), tokenByteOffsets: [0], basis: 2 });
  const second = create(TokenLogprobsSchema, { tokenIds: [195, 169], tokenLogprobs: [-1.25, -0.125], tokens: ["<0xC3>", "<0xA9>"], tokenBytes: new Uint8Array([195, 169]), tokenByteOffsets: [0, 1] });
  const events = [
    create(StreamEventSchema, { event: { case: "start", value: { id: "a", model: "m" } } }),
    create(StreamEventSchema, { event: { case: "delta", value: { content: { case: "text", value: "h" }, logprobs: first } } }),
    create(StreamEventSchema, { event: { case: "delta", value: { content: { case: "text", value: "é" }, logprobs: second } } }),
    create(StreamEventSchema, { event: { case: "delta", value: { partIndex: 1, content: { case: "toolCall", value: { id: "c", name: "f", argumentsJson: '{"a":' } } } } }),
    create(StreamEventSchema, { event: { case: "delta", value: { partIndex: 1, content: { case: "toolCall", value: { argumentsJson: "1}" } } } } }),
    create(StreamEventSchema, { event: { case: "end", value: { id: "b", finishes: [{ finishReason: 1, rawFinishReason: "stop" }] } } }),
  ];
  const response = await accumulate(events);
  const completion = new Completion(response);
  assert.equal(response.id, "b");
  assert.equal(response.model, "m");
  assert.equal(completion.text, "hé");
  assert.equal(completion.toolCalls[0]?.argumentsJson, '{"a":1}');
  assert.deepEqual(response.choices[0]?.logprobs?.tokenByteOffsets, [0, 1, 2]);
  assert.equal(response.choices[0]?.logprobs?.basis, 2);
  assert.equal(response.choices[0]?.message?.role, 4);
  assert.equal(response.choices[0]?.finishReason, 1);
});

interface AccumulationCase {
  name: string;
  events: JsonValue[];
  response?: JsonValue;
  error?: string;
}

const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "../../testdata/stream_accumulation.json");
for (const c of JSON.parse(readFileSync(VECTORS, "utf8")).cases as AccumulationCase[]) {
  test(`stream accumulation vector ${c.name}`, () => {
    const acc = new StreamAccumulator();
    const fold = () => {
      for (const event of c.events) acc.add(fromJson(StreamEventSchema, event));
    };
    if (c.error !== undefined) {
      assert.throws(fold, (e: unknown) => e instanceof StreamOrderError && e.message.includes(c.error!));
      return;
    }
    fold();
    assert.ok(acc.ended);
    const problems = differences(c.response!, toJson(ResponseSchema, acc.result()));
    assert.deepEqual(problems, [], problems.join("\n"));
  });
}

test("the accumulated response never aliases the events (a whole part extended later)", () => {
  const whole = create(StreamEventSchema, {
    event: { case: "delta", value: { content: { case: "part", value: { content: { case: "reasoning", value: { text: "a" } } } } } },
  });
  const more = create(StreamEventSchema, { event: { case: "delta", value: { content: { case: "reasoning", value: { text: "b" } } } } });
  const acc = new StreamAccumulator().add(whole).add(more);
  const result = acc.result();
  assert.equal(result.choices[0]?.message?.parts[0]?.content.value && (result.choices[0].message.parts[0].content.value as { text: string }).text, "ab");
  assert.equal((whole.event.value as { content: { value: { content: { value: { text: string } } } } }).content.value.content.value.text, "a");
});

test("a chunk of 32k tokens with 20 alternatives each accumulates (no argument spread overflows the stack)", () => {
  const n = 32_768;
  const chunk = create(TokenLogprobsSchema, {
    tokenIds: Array.from({ length: n }, (_, i) => i),
    tokenLogprobs: new Array(n).fill(-1),
    topCounts: new Array(n).fill(20),
    topTokenIds: new Array(n * 20).fill(7),
    topLogprobs: new Array(n * 20).fill(-2),
  });
  const delta = create(StreamEventSchema, {
    event: { case: "delta", value: { content: { case: "text", value: "x" }, logprobs: chunk, tokenIds: chunk.tokenIds } },
  });
  const response = new StreamAccumulator().add(delta).result();
  assert.equal(response.choices[0]?.logprobs?.topLogprobs.length, n * 20);
  assert.equal(response.choices[0]?.sampledTokens?.partIndexes.length, n);
});

test("the comparison rules", () => {
  assert.deepEqual(differences({ x: 0.1 }, { x: 0.10000000149011612 }), []);
  assert.deepEqual(differences({ x: "NaN" }, { x: NaN }), []);
  assert.deepEqual(differences({ x: "9007199254740993" }, { x: "9007199254740993" }), []);
  assert.notDeepEqual(differences({ x: "9007199254740993" }, { x: "9007199254740992" }), []);
  assert.notDeepEqual(differences({ x: 0.1 }, { x: 0.1001 }), []);
  assert.notDeepEqual(differences({ x: [1, 2] }, { x: [1] }), []);
  assert.notDeepEqual(differences({ x: 1 }, {}), []);
  assert.deepEqual(differences({ timing: 1 }, { timing: 2 }), []);
  assert.deepEqual(differences({ response: { a: { b: 1 } } }, { response: { a: { b: 2 } } }, "$", new Set(["a.b"])), []);
});
