// The TypeScript runner of the service conformance suite (conformance/service): every case through ModelirClient
// against `modelir serve` on a free port, compared by the rules of conformance/README.md.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  accumulate,
  DetokenizeRequestSchema,
  DetokenizeResponseSchema,
  EmbedRequestSchema,
  EmbedResponseSchema,
  GenerateRequestSchema,
  GenerateResponseSchema,
  GetServerInfoResponseSchema,
  IR_VERSION,
  ListModelsResponseSchema,
  ModelirClient,
  ModelirError,
  StreamGenerateRequestSchema,
  StreamGenerateResponseSchema,
  type StreamEvent,
  TokenizeRequestSchema,
  TokenizeResponseSchema,
  UnsupportedCapabilitiesSchema,
  ValidateRequestSchema,
  ValidateResponseSchema,
} from "../src/index";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb";
import { answerPath, differences } from "./compare";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const SUITE = join(REPO, "conformance/service");
const MODELIR = process.env.MODELIR_BIN ?? join(REPO, ".venv/bin/modelir");

interface Case {
  description: string;
  server: string;
  rpc: string;
  token?: string;
  /** The call's deadline (default 30 s). */
  deadlineMs?: number;
  /** Make the call this many times and answer with the last (the first ones spend a budget). */
  repeat?: number;
  /** Cancel the stream from this side after this many events. */
  cancelAfterEvents?: number;
  request: JsonValue;
  ignore?: string[];
  expect: Record<string, JsonValue>;
}

async function startServer(name: string): Promise<{ process: ChildProcess; url: string }> {
  const spec = JSON.parse(readFileSync(join(SUITE, "servers.json"), "utf8"))[name];
  const child = spawn(MODELIR, ["serve", "--host", "127.0.0.1", "--port", "0", "--grace", "0", ...spec.args], {
    cwd: SUITE,
    env: { ...process.env, ...spec.env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const seen: string[] = [];
  for await (const line of createInterface({ input: child.stderr! })) {
    seen.push(line);
    const match = /modelir serving .* on [\d.]+:(\d+)/.exec(line);
    if (match) {
      child.stderr!.resume(); // keep draining the log so the server never blocks on a full pipe
      return { process: child, url: `http://127.0.0.1:${match[1]}` };
    }
  }
  throw new Error(`modelir serve (${name}) exited before listening:\n${seen.join("\n")}`);
}

function errorJson(error: unknown): JsonValue {
  if (!(error instanceof ModelirError)) throw error;
  const out: Record<string, JsonValue> = { code: error.codeName };
  if (error.errorInfo) {
    out.errorInfo = toJson(ErrorInfoSchema, error.errorInfo);
    out.reason = error.reason;
  }
  if (error.badRequest) out.badRequest = toJson(BadRequestSchema, error.badRequest);
  if (error.unsupported) out.unsupportedCapabilities = toJson(UnsupportedCapabilitiesSchema, error.unsupported);
  if (error.retryInfo) out.retryInfo = toJson(RetryInfoSchema, error.retryInfo);
  return out;
}

async function callOnce(client: ModelirClient, c: Case): Promise<Record<string, JsonValue>> {
  const events: StreamEvent[] = [];
  const toEvent = (event: StreamEvent) =>
    toJson(StreamGenerateResponseSchema, create(StreamGenerateResponseSchema, { event }));
  try {
    switch (c.rpc) {
      case "Generate": {
        const response = await client.generate(fromJson(GenerateRequestSchema, c.request).request!);
        return { response: toJson(GenerateResponseSchema, create(GenerateResponseSchema, { response })) };
      }
      case "StreamGenerate": {
        const cancel = new AbortController();
        for await (const event of client.stream(fromJson(StreamGenerateRequestSchema, c.request).request!, cancel.signal)) {
          events.push(event);
          if (events.length === c.cancelAfterEvents) cancel.abort(); // the next read fails CANCELLED
        }
        return {
          stream: events.map(toEvent),
          accumulated: toJson(GenerateResponseSchema.fields[0]!.message!, await accumulate(events)),
        };
      }
      case "Tokenize":
        return { response: toJson(TokenizeResponseSchema, await client.tokenize(fromJson(TokenizeRequestSchema, c.request))) };
      case "Detokenize": {
        const request = fromJson(DetokenizeRequestSchema, c.request);
        const text = await client.detokenize(request.model, request.tokenIds);
        return { response: toJson(DetokenizeResponseSchema, create(DetokenizeResponseSchema, { text })) };
      }
      case "ListModels":
        return { response: toJson(ListModelsResponseSchema, create(ListModelsResponseSchema, { models: await client.listModels() })) };
      case "Validate":
        return { response: toJson(ValidateResponseSchema, await client.validate(fromJson(ValidateRequestSchema, c.request).request!)) };
      case "GetServerInfo":
        return { response: toJson(GetServerInfoResponseSchema, await client.serverInfo()) };
      case "Embed":
        return { response: toJson(EmbedResponseSchema, await client.embed(fromJson(EmbedRequestSchema, c.request))) };
    }
    throw new Error(`unknown rpc ${c.rpc}`);
  } catch (error) {
    // A stream that fails after some events answers with them too.
    return events.length > 0 ? { stream: events.map(toEvent), error: errorJson(error) } : { error: errorJson(error) };
  }
}

/** One case's answer: the call made `repeat` times (default once), the last answer kept. */
async function call(client: ModelirClient, c: Case): Promise<Record<string, JsonValue>> {
  let answer: Record<string, JsonValue> = {};
  for (let i = 0; i < (c.repeat ?? 1); i++) answer = await callOnce(client, c);
  return answer;
}

/**
 * The servers to test instead of starting `modelir serve`: MODELIR_CONFORMANCE_<NAME>=host:port for each name of
 * servers.json the implementation under test serves; undefined when no address is given.
 */
export function externalServers(env: Record<string, string | undefined>): Record<string, string> | undefined {
  const names = Object.keys(JSON.parse(readFileSync(join(SUITE, "servers.json"), "utf8")));
  const given = Object.fromEntries(
    names.flatMap((name) => {
      const address = env[`MODELIR_CONFORMANCE_${name.toUpperCase()}`];
      return address ? [[name, `http://${address}`]] : [];
    }),
  );
  return Object.keys(given).length > 0 ? given : undefined;
}

const servers: Record<string, { process?: ChildProcess; url: string }> = {};
before(async () => {
  const external = externalServers(process.env);
  if (external) for (const [name, url] of Object.entries(external)) servers[name] = { url };
  else for (const name of Object.keys(JSON.parse(readFileSync(join(SUITE, "servers.json"), "utf8")))) servers[name] = await startServer(name);
});
after(() => {
  for (const { process } of Object.values(servers)) process?.kill("SIGTERM");
});

const casesDir = join(SUITE, "cases");
for (const file of readdirSync(casesDir).filter((f) => f.endsWith(".json")).sort()) {
  test(`service case ${file}`, async (t) => {
    const c: Case = JSON.parse(readFileSync(join(casesDir, file), "utf8"));
    if (!servers[c.server]) return t.skip(`no address given for the ${c.server} server`);
    const client = new ModelirClient(servers[c.server]!.url, { token: c.token, timeoutMs: c.deadlineMs ?? 30_000 });
    try {
      const problems = differences(c.expect, await call(client, c), "$", new Set(c.ignore ?? []));
      assert.deepEqual(problems, [], problems.join("\n"));
      // After a cancelled call the server must answer the next one as usual.
      if (c.cancelAfterEvents !== undefined) assert.ok((await client.serverInfo()).irVersion);
    } finally {
      client.close();
    }
  });
}

test("ignore paths start at each answer's root and name every item of a list", () => {
  const ignore = new Set(["serverVersion", "event.delta.text"]);
  const expected = { response: { serverVersion: "1" }, stream: [{ event: { delta: { text: "a" } } }] };
  const actual = { response: { serverVersion: "2" }, stream: [{ event: { delta: { text: "b" } } }] };
  assert.deepEqual(differences(expected, actual, "$", ignore), []);
  assert.equal(answerPath("$.accumulated.choices[1].message.parts[0].text"), "choices.message.parts.text");
  assert.deepEqual(externalServers({ MODELIR_CONFORMANCE_OPEN: "127.0.0.1:50051" }), { open: "http://127.0.0.1:50051" });
  assert.equal(externalServers({}), undefined);
});

test("connect() checks the server's IR version and accepts the same major", async (t) => {
  if (!servers.open) return t.skip("no address given for the open server");
  const client = await ModelirClient.connect(servers.open!.url);
  try {
    assert.equal((await client.serverInfo()).irVersion.split(".")[0], IR_VERSION.split(".")[0]);
  } finally {
    client.close();
  }
});
