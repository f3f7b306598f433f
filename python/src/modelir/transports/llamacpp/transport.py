"""llama.cpp `llama-server`: native `/completion` for raw prompts and token ids, `/v1/chat/completions` for
conversations, `/tokenize` (with pieces) and `/detokenize`.

Facts this follows (llama-server's README, https://github.com/ggml-org/llama.cpp/tree/master/tools/server): native
`n_probs` logprobs are taken *before* sampling (softmax of raw logits; they ignore temperature and grammar, and the
sampled token is often absent from the list), so they are reported with basis PRE_SAMPLING; `post_sampling_probs`
(a provider option) renames them `prob`/`top_probs` (probabilities, possibly fewer than asked) and they are
reported as logs with basis POST_SAMPLING; `token` strings are cut to valid UTF-8 while `bytes` keep the raw
bytes; the native stream ends without `[DONE]` (its last event has `stop: true`); `/tokenize` pieces are strings,
or byte lists when not valid UTF-8. There are no prompt logprobs (`echo` is silently ignored), so this manifest
does not claim input scoring, and such requests are rejected up front.
"""

from __future__ import annotations

import orjson

from modelir import errors
from modelir.logprobs import build as lp
from modelir.transports import _common as common
from modelir.transports import token_prompt
from modelir.transports.base import (
    HttpRequest,
    HttpResponse,
    HttpTransport,
    StreamLifter,
    TokenPromptSteps,
    json_error,
)
from modelir.transports.llamacpp import chat, completion, embed
from modelir.transports.llamacpp.chat import LlamaCppChat
from modelir.transports.llamacpp.completion_stream import CompletionStreamLifter
from modelir.transports.llamacpp.sampling import JSON_HEADERS
from modelir.transports.manifests import COMMON, ENGINE_SAMPLING, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import capabilities_pb2, embedding_pb2, logprobs_pb2, request_pb2, response_pb2, service_pb2

PROVIDER_OPTION_KEYS = (
    "cache_prompt",
    "dry_multiplier",
    "ignore_eos",
    "post_sampling_probs",
    "typical_p",
)


class LlamaCpp(HttpTransport):
    name = "llamacpp"
    answer_keys = ("choices", "content")  # see HttpTransport.answer_keys
    version = "1.0.0"

    def __init__(self, *, provider_model: str = "") -> None:
        super().__init__(provider_model=provider_model)
        self._chat = LlamaCppChat(provider_model=provider_model)

    capabilities = capability_set(
        COMMON | LOGPROBS | OPENAI_SAMPLING | ENGINE_SAMPLING,
        "COMPLETION CHAT TOKEN_INPUT SYSTEM_MESSAGES SAMPLED_TOKEN_IDS CONSTRAINT_CHOICE "
        "CONSTRAINT_JSON_SCHEMA CONSTRAINT_JSON_OBJECT CONSTRAINT_GRAMMAR TOKENIZE LOGIT_BIAS "
        "EMBEDDINGS "  # a server started without `--embeddings` answers 501, typed PROVIDER_REJECTED
        "MULTI_TURN_TOKEN_INPUT",  # `/apply-template` + `/tokenize`, then `/completion` with the ids (`token_prompt`)
    )
    # llama-server clamps larger n_probs silently; the manifest says where the honest limit is.
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=1)
    seed_range = (0, 2**32 - 2)  # a uint32, whose last value (LLAMA_DEFAULT_SEED) means "random"
    grammar_dialects = ("GBNF",)
    provider_option_keys = PROVIDER_OPTION_KEYS
    logprob_bases = ("PRE_SAMPLING", "POST_SAMPLING")
    part_kinds = OpenAIChat.part_kinds  # conversations go to the chat endpoint

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = token_prompt.unsupported(request)
        if request.WhichOneof("input") == "conversation":
            if request.logprob_options.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING:
                reasons.append("Post-sampling logprobs come from the native /completion endpoint; send a raw prompt.")
            if request.sampling.HasField("max_output_tokens") and request.sampling.max_output_tokens == 0:
                reasons.append("llama-server still generates a token when asked for none (max_output_tokens 0).")
        elif request.sampling.HasField("max_output_tokens") and request.sampling.max_output_tokens == 0:
            reasons.append("llama-server still generates a token when asked for none (n_predict 0).")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        if request.WhichOneof("input") == "conversation":
            return self._chat.lower(request, stream=stream)
        return completion.lower(request, stream=stream, transport=self.name)

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        if request.WhichOneof("input") == "conversation":
            return self._chat.lift(request, response)
        return completion.lift(request, response)

    def lift_accounted(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        """A chat answer in one decode where that shows accounting has nothing to add (`OpenAIChat.lift_once`)."""
        if request.WhichOneof("input") == "conversation":
            out = self._chat.lift_once(request, response, self.native_fields(request, "unary"))
            if out is not None:
                return out
        return super().lift_accounted(request, response)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        if request.WhichOneof("input") == "conversation":
            return self._chat.stream_lifter(request)
        return CompletionStreamLifter(request)

    def native_fields(self, request: request_pb2.Request | None, kind: str) -> str:
        """The chat and raw-prompt routes answer with their wires' members (`native_fields/llamacpp.toml`)."""
        if kind in ("unary", "stream") and request is not None:
            route = "chat" if request.WhichOneof("input") == "conversation" else "completion"
            return f"llamacpp.{route}" + ("_stream" if kind == "stream" else "")
        return f"llamacpp.{kind}"

    def error(self, response: HttpResponse) -> errors.ModelError:
        """As the OpenAI-style error body says, except that a token id outside the vocabulary (detokenize, token
        input) is a request error: llama-server answers it with a 500 carrying the C++ range check's message,
        which retrying cannot fix; and so are its 501 for a feature it was not started with (`--embeddings`) and
        its 500 for an embedding input longer than its batch (seen live), which it never truncates."""
        exc = json_error(response)
        if response.status == 500 and "too large to process" in exc.message:
            return errors.ProviderRejectedError(
                f"the input is longer than the server can embed: {exc.message}",
                http_status=response.status,
                provider_code=exc.provider_code,
            )
        if response.status == 501:
            return errors.ProviderRejectedError(
                f"the server does not offer this: {exc.message}",
                http_status=response.status,
                provider_code=exc.provider_code,
            )
        if response.status == 500 and "_M_range_check" in exc.message:
            return errors.ProviderRejectedError(
                f"a token id is outside the model's vocabulary: {exc.message}",
                http_status=response.status,
                provider_code=exc.provider_code,
            )
        return exc

    # ---- embed (IR 1.1, `llamacpp.embed`) ----------------------------------------------------------

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        return embed.SUPPORT.problems(request)

    def lower_embed(self, request: embedding_pb2.EmbedRequest) -> HttpRequest:
        return embed.lower(request, self.provider_model or request.model)

    def lift_embed(self, request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
        return embed.lift(request, response)

    # ---- tokenize ----------------------------------------------------------------------------------

    def lower_tokenize(self, request: service_pb2.TokenizeRequest) -> list[HttpRequest]:
        """`/tokenize` with pieces of context + text, and of the context alone when there is one."""

        def tokenize(content: str, add_special: bool) -> HttpRequest:
            body = {"content": content, "add_special": add_special, "with_pieces": True}
            return HttpRequest("POST", "/tokenize", orjson.dumps(body), JSON_HEADERS)

        natives = [tokenize(request.context + request.text, request.add_special_tokens)]
        if request.context:
            natives.append(tokenize(request.context, request.add_special_tokens))
        return natives

    def lift_tokenize(
        self, request: service_pb2.TokenizeRequest, responses: list[HttpResponse]
    ) -> service_pb2.TokenizeResponse:
        whole = common.parse_json(responses[0].body, "tokenize body")["tokens"]
        start, straddles = 0, False
        if len(responses) > 1:
            context = common.parse_json(responses[1].body, "tokenize body")["tokens"]
            while start < min(len(whole), len(context)) and whole[start]["id"] == context[start]["id"]:
                start += 1
            straddles = start < len(context)
        pieces = whole[start:]
        raw = [bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in pieces]
        out = service_pb2.TokenizeResponse(
            token_ids=[p["id"] for p in pieces],
            tokens=[
                p["piece"] if isinstance(p["piece"], str) else b.decode("utf-8", "replace")
                for p, b in zip(pieces, raw, strict=True)
            ],
            token_bytes=b"".join(raw),
            straddles_context=straddles,
        )
        out.token_byte_offsets.extend(lp.joined(raw)[1])
        return out

    def lower_detokenize(self, token_ids: list[int]) -> HttpRequest:
        return HttpRequest("POST", "/detokenize", orjson.dumps({"tokens": token_ids}), JSON_HEADERS)

    def lift_detokenize(self, response: HttpResponse) -> str:
        text: str = common.parse_json(response.body, "detokenize body")["content"]
        return text

    def lower_tokenizer_info(self, model: str) -> list[HttpRequest]:
        """`GET /v1/models`, whose `meta.n_vocab` is the vocabulary size (`ModelInfo.tokenizer`)."""
        return [HttpRequest("GET", "/v1/models")]

    def lift_tokenizer_info(self, responses: list[HttpResponse]) -> capabilities_pb2.TokenizerInfo:
        """The vocabulary size. `/props` names BOS and EOS only as text (`bos_token`, `eos_token`), not as ids,
        so they are left unset rather than guessed."""
        body = common.parse_json(responses[0].body, "models body")
        models = body.get("data") if isinstance(body, dict) else None
        meta = models[0].get("meta") if isinstance(models, list) and models and isinstance(models[0], dict) else None
        size = meta.get("n_vocab") if isinstance(meta, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size < 2**31:
            raise errors.MalformedResponseError(f"{self.name}: /v1/models has no vocabulary size (meta.n_vocab)")
        return capabilities_pb2.TokenizerInfo(vocabulary_size=size)

    def lower_render_prompt(self, request: request_pb2.Request) -> HttpRequest:
        """`/apply-template`: the conversation through the server's chat template, without generating."""
        body = {"messages": self._chat.body(request, stream=False)["messages"]}
        return HttpRequest("POST", "/apply-template", orjson.dumps(body), JSON_HEADERS)

    def lift_render_prompt(self, response: HttpResponse) -> str:
        prompt = common.parse_json(response.body, "apply-template body").get("prompt")
        if not isinstance(prompt, str):
            raise errors.MalformedResponseError(f"{self.name}: the /apply-template answer has no string `prompt`")
        return prompt

    def runs_as_token_prompt(self, request: request_pb2.Request) -> bool:
        """A token-in conversation, and a first turn that asks for token ids (`LogprobOptions.require_token_ids`):
        the chat route reports the sampled ids only beside logprobs and the prompt's ids never, so such a
        conversation runs the token-prompt path with no token turns (`/apply-template`, `/tokenize`, then
        `/completion` with the ids and `return_tokens`), whose answer has both, like every later turn's. One that a
        token prompt cannot carry (`token_prompt.cannot_carry`: it ends with an assistant turn to continue) stays on
        the chat route, and its answer says that the prompt's ids are missing (`chat.prompt_ids_unavailable`)."""
        if token_prompt.is_token_in(request):
            return True
        return chat.asks_for_token_ids(request) and not token_prompt.cannot_carry(request)

    def token_prompt_steps(self, plan: token_prompt.Plan) -> TokenPromptSteps:
        """Each render through `/apply-template` (with the tools and the generation prompt), then every render's
        text through `/tokenize` as the chat route tokenizes a prompt (special tokens added and parsed), and each
        sentinel alone (none added)."""
        renders = []
        for one in plan.renders:
            chat = self._chat.body(one, stream=False)
            body = {"messages": chat["messages"], "add_generation_prompt": True}
            if "tools" in chat:
                body["tools"] = chat["tools"]
            renders.append(HttpRequest("POST", "/apply-template", orjson.dumps(body), JSON_HEADERS))
        texts = [self.lift_render_prompt(answer) for answer in (yield renders)]

        def tokenize(content: str, add_special: bool) -> HttpRequest:
            body = {"content": content, "add_special": add_special, "parse_special": True}
            return HttpRequest("POST", "/tokenize", orjson.dumps(body), JSON_HEADERS)

        answers = yield [tokenize(t, True) for t in texts] + [tokenize(s, False) for s in plan.sentinels]
        ids = [common.parse_json(a.body, "tokenize body")["tokens"] for a in answers]
        return ids[: len(texts)], ids[len(texts) :]
