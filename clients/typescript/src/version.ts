// The IR version this client was generated from (read from its descriptors) and the compatibility rule.
import { getOption } from "@bufbuild/protobuf";
import { file_modelir_v1_version, ir_version } from "./gen/modelir/v1/version_pb";

/** The `(modelir.v1.ir_version)` option of the `version.proto` this client was generated from. */
export const IR_VERSION: string = getOption(file_modelir_v1_version, ir_version);

/** The three numbers of a semantic version; throws on anything else. */
export function parseSemver(text: string): [number, number, number] {
  const match = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:[-+].*)?$/.exec(text);
  if (!match) throw new Error(`not a semantic version: ${JSON.stringify(text)}`);
  return [Number(match[1]), Number(match[2]), Number(match[3])];
}

/** A server whose IR major version differs from the client's: nothing it sends can be trusted to decode. */
export class IncompatibleServerError extends Error {
  constructor(
    readonly clientIrVersion: string,
    readonly serverIrVersion: string,
  ) {
    super(
      `the server speaks modelir IR ${serverIrVersion || "(none reported)"}, but this client was generated from ` +
        `IR ${clientIrVersion}: the major versions differ, so the client refuses it (regenerate the client from ` +
        `the server's proto/ or talk to a server of IR ${parseSemver(clientIrVersion)[0]}.x)`,
    );
    this.name = "IncompatibleServerError";
  }
}

/** Throws `IncompatibleServerError` unless `serverIrVersion` has the client's major version. */
export function checkCompatible(serverIrVersion: string, clientIrVersion: string = IR_VERSION): void {
  let serverMajor: number;
  try {
    serverMajor = parseSemver(serverIrVersion)[0];
  } catch {
    throw new IncompatibleServerError(clientIrVersion, serverIrVersion);
  }
  if (serverMajor !== parseSemver(clientIrVersion)[0]) {
    throw new IncompatibleServerError(clientIrVersion, serverIrVersion);
  }
}
