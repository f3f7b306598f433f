// A reader of modelir record files, as the "Record files" section of proto/README.md specifies them: the format
// sniffed from the first byte, the header checked, every record kept whole (unknown fields included), a torn last
// entry skipped and reported.
import { readFileSync } from "node:fs";
import {
  createFileRegistry,
  fromBinary,
  fromJson,
  toBinary,
  type DescMessage,
  type JsonValue,
  type Registry,
} from "@bufbuild/protobuf";
import { protoCamelCase } from "@bufbuild/protobuf/reflect";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { RecordFileEntrySchema, type Record as RecordMessage, type RecordHeader } from "./gen/modelir/v1/record_pb";
import { IR_VERSION, parseSemver } from "./version";

/** An entry the reader passed over: a torn last entry, or a complete one that does not parse. */
export interface SkippedEntry {
  /** The entry's position in the file, from 0 (the header is 0). */
  index: number;
  reason: string;
}

/** A record file, read whole into memory: its header, then `records()`; `skipped` fills as they are read. */
export class RecordFile {
  readonly warnings: string[] = [];
  readonly skipped: SkippedEntry[] = [];
  readonly header: RecordHeader;
  private readonly frames: { bytes: Uint8Array; torn: boolean }[];
  private readonly writerEntry: DescMessage;
  private readonly writerRegistry: Registry;

  constructor(
    readonly path: string,
    readonly format: "jsonl" | "binary",
    data: Uint8Array,
  ) {
    this.frames = format === "jsonl" ? jsonlFrames(data) : binaryFrames(data);
    const first = this.frames[0];
    const notRecords = new Error(`${path} is not a record file: its first entry is not a header`);
    if (!first || first.torn) throw notRecords;
    let header: RecordHeader | undefined;
    try {
      // The header is read with this client's own types: members a newer writer added to it are ignored.
      const entry =
        format === "jsonl"
          ? fromJson(RecordFileEntrySchema, parseJson(first.bytes), { ignoreUnknownFields: true })
          : fromBinary(RecordFileEntrySchema, first.bytes);
      header = entry.entry.case === "header" ? entry.entry.value : undefined;
    } catch {
      throw notRecords;
    }
    if (!header) throw notRecords;
    this.header = header;
    const [theirs, mine] = [parseSemver(header.irVersion), parseSemver(IR_VERSION)];
    if (theirs[0] !== mine[0]) {
      throw new Error(`${path} was written with modelir IR ${header.irVersion}; this reader reads IR ${IR_VERSION} (another major version)`);
    }
    if (theirs[1] > mine[1]) {
      this.warnings.push(
        `${path} was written with the newer IR ${header.irVersion} (this reader: ${IR_VERSION}); fields this reader does not know are kept as unknown fields`,
      );
    }
    const set = fromBinary(FileDescriptorSetSchema, header.irDescriptorSet);
    // protobuf-es takes a field's JSON name from the descriptor as is, and a set written by Python's
    // `CopyToProto` has none: derive them as protoc would, or every JSON member would be "unknown".
    const fill = (messages: typeof set.file[number]["messageType"]): void => {
      for (const message of messages) {
        for (const field of message.field) if (!field.jsonName) field.jsonName = protoCamelCase(field.name);
        fill(message.nestedType);
      }
    };
    for (const file of set.file) fill(file.messageType);
    this.writerRegistry = createFileRegistry(set);
    const entry = this.writerRegistry.getMessage("modelir.v1.RecordFileEntry");
    if (!entry) throw new Error(`${path}: the header's descriptor set has no modelir.v1.RecordFileEntry`);
    this.writerEntry = entry;
  }

  /** Every record, in order; torn entries and entries that do not parse are listed in `skipped` instead. */
  *records(): Generator<RecordMessage> {
    for (const [index, frame] of this.frames.entries()) {
      if (index === 0) continue;
      if (frame.torn) {
        this.skipped.push({ index, reason: "torn last entry (the file ends inside it)" });
        return;
      }
      try {
        const entry = fromBinary(RecordFileEntrySchema, this.writerBytes(frame.bytes));
        if (entry.entry.case === "record") yield entry.entry.value;
        else this.skipped.push({ index, reason: "not a record entry" });
      } catch (error) {
        this.skipped.push({ index, reason: `does not parse: ${String(error)}` });
      }
    }
  }

  /** An entry's binary form. A JSON line is decoded with the writer's types and re-encoded, so that reading the
   * bytes with this client's types keeps a newer writer's fields as unknown fields (`$unknown`), which a copy
   * writes back. */
  private writerBytes(bytes: Uint8Array): Uint8Array {
    if (this.format === "binary") return bytes;
    const options = { ignoreUnknownFields: true, registry: this.writerRegistry };
    return toBinary(this.writerEntry, fromJson(this.writerEntry, parseJson(bytes), options));
  }
}

/** Opens a record file of either format, reads its header and refuses an IR of another major version. */
export function openRecords(path: string): RecordFile {
  const data = readFileSync(path);
  return new RecordFile(path, data[0] === 0x7b ? "jsonl" : "binary", data);
}

function parseJson(bytes: Uint8Array): JsonValue {
  return JSON.parse(new TextDecoder().decode(bytes)) as JsonValue;
}

function jsonlFrames(data: Uint8Array): { bytes: Uint8Array; torn: boolean }[] {
  const frames = [];
  let start = 0;
  while (start < data.length) {
    const end = data.indexOf(0x0a, start);
    // A last line with no terminating newline is torn, even if its bytes parse.
    if (end < 0) return [...frames, { bytes: data.subarray(start), torn: true }];
    frames.push({ bytes: data.subarray(start, end), torn: false });
    start = end + 1;
  }
  return frames;
}

function binaryFrames(data: Uint8Array): { bytes: Uint8Array; torn: boolean }[] {
  const frames = [];
  let at = 0;
  while (at < data.length) {
    let size = 0;
    let shift = 0;
    let byte: number;
    do {
      if (at >= data.length) return [...frames, { bytes: new Uint8Array(), torn: true }];
      byte = data[at++]!;
      size += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80);
    if (at + size > data.length) return [...frames, { bytes: data.subarray(at), torn: true }];
    frames.push({ bytes: data.subarray(at, at + size), torn: false });
    at += size;
  }
  return frames;
}
