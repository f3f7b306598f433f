// The thin client: one method per ModelService RPC over gRPC (HTTP/2), typed errors, the IR version handshake.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { EmbedRequestSchema, type EmbedResponse } from "./gen/modelir/v1/embedding_pb";
import type { RequestSchema } from "./gen/modelir/v1/request_pb";
import type { Response } from "./gen/modelir/v1/response_pb";
import {
  ModelService,
  TokenizeRequestSchema,
  type GetServerInfoResponse,
  type ModelInfo,
  type TokenizeResponse,
  type ValidateResponse,
} from "./gen/modelir/v1/service_pb";
import type { StreamEvent } from "./gen/modelir/v1/stream_pb";
import { fromRpcError } from "./errors";
import { checkCompatible } from "./version";

export type RequestInit = MessageInitShape<typeof RequestSchema>;
export type TokenizeInit = MessageInitShape<typeof TokenizeRequestSchema>;
export type EmbedInit = MessageInitShape<typeof EmbedRequestSchema>;

export interface ClientOptions {
  /** A bearer token, sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** A deadline for each call (unary or stream), in milliseconds; a call past it fails `DEADLINE_EXCEEDED`. */
  timeoutMs?: number;
}

async function typed<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (error) {
    throw fromRpcError(error);
  }
}

export class ModelirClient {
  private readonly sessions: Http2SessionManager;
  private readonly rpc: Client<typeof ModelService>;
  private readonly timeoutMs?: number;

  /** A client for the server at `baseUrl` (e.g. `http://127.0.0.1:50051`), without the version handshake. */
  constructor(baseUrl: string, options: ClientOptions = {}) {
    const auth: Interceptor = (next) => (req) => {
      if (options.token) req.header.set("authorization", `Bearer ${options.token}`);
      return next(req);
    };
    this.sessions = new Http2SessionManager(baseUrl);
    this.rpc = createClient(
      ModelService,
      createGrpcTransport({ baseUrl, sessionManager: this.sessions, interceptors: [auth] }),
    );
    this.timeoutMs = options.timeoutMs;
  }

  /** A client that has checked the server's IR version and refuses another major (`IncompatibleServerError`). */
  static async connect<T extends ModelirClient>(
    this: new (baseUrl: string, options?: ClientOptions) => T,
    baseUrl: string,
    options: ClientOptions = {},
  ): Promise<T> {
    const client = new this(baseUrl, options);
    try {
      checkCompatible((await client.serverInfo()).irVersion);
    } catch (error) {
      client.close();
      throw error;
    }
    return client;
  }

  /** Runs one request; returns the complete response. */
  async generate(request: RequestInit): Promise<Response> {
    const answer = await typed(this.rpc.generate({ request }, { timeoutMs: this.timeoutMs }));
    if (!answer.response) throw new Error("the server answered Generate without a response");
    return answer.response;
  }

  /**
   * Runs one request and yields its stream events; `accumulate` folds them into the unary response. Aborting
   * `signal` (or leaving the loop early) cancels the call: the server stops generating.
   */
  async *stream(request: RequestInit, signal?: AbortSignal): AsyncGenerator<StreamEvent> {
    try {
      for await (const message of this.rpc.streamGenerate({ request }, { signal, timeoutMs: this.timeoutMs })) {
        if (message.event) yield message.event;
      }
    } catch (error) {
      throw fromRpcError(error);
    }
  }

  /** Tokenizes text as the model does (optionally after a context). */
  tokenize(request: TokenizeInit): Promise<TokenizeResponse> {
    return typed(this.rpc.tokenize(create(TokenizeRequestSchema, request), { timeoutMs: this.timeoutMs }));
  }

  /** Token ids back to text, with the model's own tokenizer. */
  async detokenize(model: string, tokenIds: Iterable<number>): Promise<string> {
    const answer = await typed(this.rpc.detokenize({ model, tokenIds: [...tokenIds] }, { timeoutMs: this.timeoutMs }));
    return answer.text;
  }

  /** The configured models with their capability manifests, sorted by name. */
  async listModels(): Promise<ModelInfo[]> {
    return (await typed(this.rpc.listModels({}, { timeoutMs: this.timeoutMs }))).models;
  }

  /** Checks a request against its model's capabilities without running it. */
  validate(request: RequestInit): Promise<ValidateResponse> {
    return typed(this.rpc.validate({ request }, { timeoutMs: this.timeoutMs }));
  }

  /** The server's IR version, its own version and its transports. */
  serverInfo(): Promise<GetServerInfoResponse> {
    return typed(this.rpc.getServerInfo({}, { timeoutMs: this.timeoutMs }));
  }

  /** Embeds each input with an embedding model (IR 1.1; needs `CAPABILITY_EMBEDDINGS`), one vector per input. */
  embed(request: EmbedInit): Promise<EmbedResponse> {
    return typed(this.rpc.embed(create(EmbedRequestSchema, request), { timeoutMs: this.timeoutMs }));
  }

  /** Closes the HTTP/2 connection. */
  close(): void {
    this.sessions.abort();
  }
}
