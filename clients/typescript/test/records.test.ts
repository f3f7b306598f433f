// The record conformance vectors (clients/testdata/records, described in its make_vectors.py): every file read
// with openRecords and compared with manifest.json.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { toBinary } from "@bufbuild/protobuf";
import { ChoiceView, IR_VERSION, openRecords, RecordSchema } from "../src/index";

const VECTORS = resolve(dirname(fileURLToPath(import.meta.url)), "../../testdata/records");

interface Vector {
  irVersion: string;
  records: { key: string; status: number; text: string }[];
  skipped: number;
  recordBytes?: string[];
}

const manifest: { [name: string]: Vector } = JSON.parse(readFileSync(join(VECTORS, "manifest.json"), "utf8"));
for (const [name, want] of Object.entries(manifest)) {
  test(`record vector ${name}`, () => {
    const file = openRecords(join(VECTORS, name));
    assert.equal(file.header.irVersion, want.irVersion);
    const records = [...file.records()];
    const seen = records.map((r) => ({
      key: r.key,
      status: r.status as number,
      text: r.response?.choices[0] ? new ChoiceView(r.response.choices[0]).text : "",
    }));
    assert.deepEqual(seen, want.records);
    assert.equal(file.skipped.length, want.skipped, JSON.stringify(file.skipped));
    // A reader warns about a file of a newer minor version only (an older one holds nothing it does not know).
    const minor = (version: string) => Number(version.split(".")[1]);
    assert.equal(file.warnings.length > 0, minor(want.irVersion) > minor(IR_VERSION));
    // Unknown fields and enum values kept: re-serialized, each record is the writer's bytes.
    (want.recordBytes ?? []).forEach((bytes, i) => {
      assert.equal(Buffer.from(toBinary(RecordSchema, records[i]!)).toString("base64"), bytes, `record ${i}`);
    });
  });
}

test("a file without a header and a file of another major version are refused", () => {
  const dir = mkdtempSync(join(tmpdir(), "modelir-records-"));
  writeFileSync(join(dir, "x.jsonl"), '{"record": {"key": "a"}}\n');
  assert.throws(() => openRecords(join(dir, "x.jsonl")), /not a record file/);
  writeFileSync(join(dir, "y.jsonl"), '{"header": {"irVersion": "2.0.0"}}\n');
  assert.throws(() => openRecords(join(dir, "y.jsonl")), /another major version/);
});

// The spec's own record vectors (conformance/records, written by the Python SDK of each IR release), when present.
const SPEC_VECTORS = resolve(VECTORS, "../../../conformance/records");
interface SpecFile {
  path: string;
  format: string;
  ir_version: string;
  run_metadata: { [key: string]: string };
  torn_tail_bytes: number;
  records: { key: string; status: number; text: string }[];
}
const specFiles: SpecFile[] = existsSync(join(SPEC_VECTORS, "manifest.json"))
  ? JSON.parse(readFileSync(join(SPEC_VECTORS, "manifest.json"), "utf8")).files
  : [];
for (const want of specFiles) {
  test(`spec record vector ${want.path}`, () => {
    const file = openRecords(join(SPEC_VECTORS, want.path));
    assert.equal(file.format, want.format);
    assert.equal(file.header.irVersion, want.ir_version);
    for (const [key, value] of Object.entries(want.run_metadata)) assert.equal(file.header.runMetadata[key], value);
    const records = [...file.records()];
    const seen = records.map((r) => ({
      key: r.key,
      status: r.status as number,
      text: r.response?.choices[0] ? new ChoiceView(r.response.choices[0]).text : "",
    }));
    assert.deepEqual(seen, want.records);
    assert.equal(file.skipped.length, want.torn_tail_bytes > 0 ? 1 : 0, JSON.stringify(file.skipped));
    // A record of an Embed call (IR 1.1) holds neither request nor response; this release reads its embedding typed.
    for (const r of records.filter((r) => r.key === "embedded")) {
      assert.equal(r.request ?? r.response, undefined);
      assert.deepEqual(r.embedResponse?.embeddings[0]?.values.map(Math.fround), [Math.fround(0.6), Math.fround(-0.8)]);
    }
  });
}
