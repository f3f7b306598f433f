// The modelir TypeScript client: the generated messages, the thin client, typed errors, accessors, accumulation, the record reader.
export * from "./client";
export * from "./errors";
export * from "./accessors";
export * from "./accumulate";
export * from "./version";
export * from "./records";
export * from "./trajectory";
export * from "./gen/modelir/v1/capabilities_pb";
export * from "./gen/modelir/v1/content_pb";
export * from "./gen/modelir/v1/embedding_pb";
export * from "./gen/modelir/v1/errors_pb";
export * from "./gen/modelir/v1/logprobs_pb";
export * from "./gen/modelir/v1/record_pb";
export * from "./gen/modelir/v1/request_pb";
export * from "./gen/modelir/v1/response_pb";
export * from "./gen/modelir/v1/service_pb";
export * from "./gen/modelir/v1/stream_pb";
