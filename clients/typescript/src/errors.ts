// Typed errors, decoded from the rich gRPC status (`grpc-status-details-bin`) the server sends.
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
  type BadRequest,
  type ErrorInfo,
  type RetryInfo,
} from "./gen/google/rpc/error_details_pb";
import { UnsupportedCapabilitiesSchema, type UnsupportedCapabilities } from "./gen/modelir/v1/errors_pb";

/** The `ErrorInfo.domain` of every error modelir raises. */
export const ERROR_DOMAIN = "modelir.dev";

/** gRPC status code names, indexed by code. */
export const GRPC_CODE_NAMES = [
  "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
  "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
] as const;

/** A failed call: the gRPC code, modelir's reason (`ErrorInfo.reason`) and every structured detail sent. */
export class ModelirError extends Error {
  /** The gRPC status code. */
  readonly code: Code;
  /** `ErrorInfo.reason` when the server sent one (e.g. `UNSUPPORTED_CAPABILITY`), else the code's name. */
  readonly reason: string;
  readonly errorInfo?: ErrorInfo;
  /** The invalid fields, for `INVALID_REQUEST`. */
  readonly badRequest?: BadRequest;
  /** Every missing capability and exceeded limit, for `UNSUPPORTED_CAPABILITY`. */
  readonly unsupported?: UnsupportedCapabilities;
  /** How long to wait before retrying, when the server said (a rate limit: `RATE_LIMITED`). */
  readonly retryInfo?: RetryInfo;

  constructor(cause: ConnectError) {
    super(cause.rawMessage, { cause });
    this.name = new.target.name;
    this.code = cause.code;
    this.errorInfo = cause.findDetails(ErrorInfoSchema).find((info) => info.domain === ERROR_DOMAIN);
    this.badRequest = cause.findDetails(BadRequestSchema)[0];
    this.unsupported = cause.findDetails(UnsupportedCapabilitiesSchema)[0];
    this.retryInfo = cause.findDetails(RetryInfoSchema)[0];
    this.reason = this.errorInfo?.reason ?? GRPC_CODE_NAMES[cause.code] ?? "UNKNOWN";
  }

  /** The gRPC code's name, e.g. `FAILED_PRECONDITION`. */
  get codeName(): string {
    return GRPC_CODE_NAMES[this.code] ?? String(this.code);
  }
}

export class InvalidRequestError extends ModelirError {}
export class UnsupportedCapabilityError extends ModelirError {}
export class UnknownModelError extends ModelirError {}
export class UnauthenticatedError extends ModelirError {}
export class RateLimitedError extends ModelirError {}
export class ProviderError extends ModelirError {}
export class DeadlineExceededError extends ModelirError {}

const BY_REASON: Record<string, typeof ModelirError> = {
  INVALID_REQUEST: InvalidRequestError,
  UNSUPPORTED_CAPABILITY: UnsupportedCapabilityError,
  UNKNOWN_MODEL: UnknownModelError,
  UNAUTHENTICATED: UnauthenticatedError,
  RATE_LIMITED: RateLimitedError,
  PROVIDER_AUTH: ProviderError,
  PROVIDER_UNAVAILABLE: ProviderError,
  PROVIDER_REJECTED: ProviderError,
  DEADLINE_EXCEEDED: DeadlineExceededError,
};

/** The typed error a failed call stands for; anything that is not a `ConnectError` is returned as it is. */
export function fromRpcError(error: unknown): unknown {
  if (!(error instanceof ConnectError)) return error;
  const reason = new ModelirError(error).reason;
  const Class = BY_REASON[reason] ?? ModelirError;
  return new Class(error);
}
