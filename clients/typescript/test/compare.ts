// The comparison rules of the service conformance suite (conformance/README.md), for the TypeScript runner.
import type { JsonValue } from "@bufbuild/protobuf";

const FLOAT_WORDS: Record<string, number> = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

/** A JSON number, or a string proto-JSON uses for one (int64 as decimal, NaN and infinities); else undefined. */
function asNumber(value: JsonValue): number | bigint | undefined {
  if (typeof value === "number") return Number.isInteger(value) ? BigInt(value) : value;
  if (typeof value === "string") {
    if (value in FLOAT_WORDS) return FLOAT_WORDS[value];
    if (/^-?\d+$/.test(value)) return BigInt(value);
  }
  return undefined;
}

function sameNumber(a: number | bigint, b: number | bigint): boolean {
  if (typeof a === "bigint" && typeof b === "bigint") return a === b;
  const x = Number(a);
  const y = Number(b);
  return (Number.isNaN(x) && Number.isNaN(y)) || Math.fround(x) === Math.fround(y);
}

/**
 * `$.stream[2].event.delta` -> `event.delta`: an ignore path is dotted from the root of one answer (the response,
 * each stream event, the accumulated response, the error), with no list indexes.
 */
export function answerPath(where: string): string {
  return where.replace(/^\$\.[^.[]+(\[\d+\])?\.?/, "").replace(/\[\d+\]/g, "");
}

/** Where `actual` differs from `expected`, as JSON paths; `timing` and the `ignore` paths are skipped. */
export function differences(expected: JsonValue, actual: JsonValue, path = "$", ignore = new Set<string>()): string[] {
  const out: string[] = [];
  const isObject = (v: JsonValue): v is { [k: string]: JsonValue } => typeof v === "object" && v !== null && !Array.isArray(v);
  if (isObject(expected) && isObject(actual)) {
    for (const key of [...new Set([...Object.keys(expected), ...Object.keys(actual)])].sort()) {
      const where = `${path}.${key}`;
      if (key === "timing" || ignore.has(answerPath(where))) continue;
      if (!(key in actual)) out.push(`${where}: missing (expected ${JSON.stringify(expected[key])})`);
      else if (!(key in expected)) out.push(`${where}: unexpected ${JSON.stringify(actual[key])}`);
      else out.push(...differences(expected[key]!, actual[key]!, where, ignore));
    }
    return out;
  }
  if (Array.isArray(expected) && Array.isArray(actual)) {
    if (expected.length !== actual.length) out.push(`${path}: ${actual.length} items, expected ${expected.length}`);
    for (let i = 0; i < Math.min(expected.length, actual.length); i++) {
      out.push(...differences(expected[i]!, actual[i]!, `${path}[${i}]`, ignore));
    }
    return out;
  }
  if (expected === actual) return out;
  const e = asNumber(expected);
  const a = asNumber(actual);
  if (e !== undefined && a !== undefined && sameNumber(e, a)) return out;
  out.push(`${path}: ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
  return out;
}
