"""vLLM's OpenAI-compatible server: the completions and chat wires plus vLLM's extensions.

Raw prompts and token ids go to `/completions`, conversations to `/chat/completions`; the extensions
(vLLM's OpenAI-compatible server documentation, https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html)
are: `top_k`, `min_p`, `repetition_penalty`, `stop_token_ids`; structured outputs
(`structured_outputs`: choice, regex, json, grammar); `echo` scoring on completions and `prompt_logprobs` on chat
(top-level there; element 0 is null; keys are token ids as strings); `return_tokens_as_token_ids` (tokens spelled
`token_id:N`) and `return_token_ids` (`prompt_token_ids`) for RL; `stop_reason` beside `finish_reason`; -9999.0
as the clamp for minus infinity (read back as -inf); `/tokenize` and `/detokenize`.

Also: `return_token_ids` on every request (the sampled ids are `Choice.sampled_tokens`, see `_engine_output`);
`logit_bias` (token ids as strings) and `min_tokens`; several scored continuations as a list of prompts; a scored
continuation after a conversation as a final assistant message with `continue_final_message`; `/tokenize` with
`messages` and `add_generation_prompt` for a conversation.
"""

from __future__ import annotations

import orjson

from modelir.pipeline import continuations
from modelir.transports import _common as common
from modelir.transports import token_prompt
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter, TokenPromptSteps
from modelir.transports.manifests import capability_set
from modelir.transports.vllm import byte_level, dialect, embed, vocabulary
from modelir.transports.vllm.chat import VLLMChat
from modelir.transports.vllm.completions import VLLMCompletions
from modelir.transports.vllm.dialect import MAX_LOGPROBS, PROVIDER_OPTION_KEYS
from modelir.v1 import capabilities_pb2, embedding_pb2, request_pb2, response_pb2, service_pb2


class VLLM(HttpTransport):
    """One transport for a vLLM server: routes by input kind to the completions or chat endpoint."""

    name = "vllm"
    answer_keys = ("choices",)  # see HttpTransport.answer_keys
    version = "1.0.0"

    def __init__(self, *, provider_model: str = "") -> None:
        super().__init__(provider_model=provider_model)
        self._completions = VLLMCompletions(provider_model=provider_model)
        self._chat = VLLMChat(provider_model=provider_model)

    def _route(self, request: request_pb2.Request) -> HttpTransport:
        return self._chat if request.WhichOneof("input") == "conversation" else self._completions

    capabilities = (
        VLLMCompletions.capabilities
        | VLLMChat.capabilities
        | capability_set(
            "INPUT_SCORING SAMPLED_TOKEN_IDS TOP_K_SAMPLING MIN_P REPETITION_PENALTY STOP_TOKEN_IDS TOKENIZE "
            "LOGIT_BIAS MIN_OUTPUT_TOKENS CONSTRAINT_JSON_OBJECT TOKENIZE_CONVERSATION "
            "CONSTRAINT_CHOICE CONSTRAINT_REGEX CONSTRAINT_GRAMMAR CONSTRAINT_JSON_SCHEMA "
            "EMBEDDINGS "  # `/v1/embeddings` (`vllm.embed`), on a server started with a pooling runner
            "MULTI_TURN_TOKEN_INPUT"  # `/tokenize` with messages, then completions with the ids (`token_prompt`)
        )
    ) - capability_set("FIM")  # vLLM rejects `suffix`
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=MAX_LOGPROBS, max_choices=128)
    grammar_dialects = ("EBNF",)
    provider_option_keys = PROVIDER_OPTION_KEYS

    def scores_continuations_together(self, request: request_pb2.Request) -> bool:
        # The completions route sends several continuations as a list of prompts; the chat route renders one
        # conversation per call, so the pipeline splits them (one call each, scores merged in order).
        return self._route(request) is self._completions

    part_kinds = VLLMChat.part_kinds

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        route = self._route(request)
        reasons = token_prompt.unsupported(request)
        if route is self._chat:
            reasons += self._chat.wire_unsupported(request, streaming=streaming)
            if request.HasField("input_scoring"):
                if request.input_scoring.continuations and request.prefill:
                    reasons.append("A scored continuation is the start of the assistant's reply: drop the prefill.")
                if streaming:
                    reasons.append("vLLM returns prompt_logprobs on unary calls only, not on streams.")
        else:
            reasons += self._completions.wire_unsupported(request, streaming=streaming)
            if request.HasField("reasoning_controls"):
                reasons.append("vLLM's completions endpoint takes no reasoning controls; send a conversation.")
            generates = not request.sampling.HasField("max_output_tokens") or request.sampling.max_output_tokens > 0
            if len(continuations.of(request)) > 1 and (generates or request.sampling.choice_count > 1):
                reasons.append(
                    "Several continuations are scored as a batch of prompts, each of which would also generate; "
                    "set sampling.max_output_tokens to 0 (and one choice)."
                )
        return reasons

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        return self._route(request).lower(request, stream=stream)

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        return self._checked(request, self._route(request).lift(request, response))

    def lift_accounted(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        """A chat answer in one decode where that shows accounting has nothing to add (`OpenAIChat.lift_once`)."""
        if self._route(request) is self._chat:
            out = self._chat.lift_once(request, response, self.native_fields(request, "unary"))
            if out is not None:
                return self._checked(request, out)
        return super().lift_accounted(request, response)

    def _checked(self, request: request_pb2.Request, out: response_pb2.Response) -> response_pb2.Response:
        """What either route's answer says about text lost to byte-level tokens and about truncation."""
        for choice in out.choices:
            natural = choice.finish_reason == response_pb2.FINISH_REASON_STOP
            byte_level.flag_lost_text(out.warnings, byte_level.lost_text(choice.logprobs.tokens, natural), choice.index)
        out.warnings.extend(dialect.truncation_warnings(request, out.usage))
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return self._route(request).stream_lifter(request)

    def native_fields(self, request: request_pb2.Request | None, kind: str) -> str:
        """The chat and completions routes answer with their wires' members (`native_fields/vllm.toml`)."""
        if kind in ("unary", "stream") and request is not None:
            route = "chat" if self._route(request) is self._chat else "completions"
            return f"vllm.{route}" + ("_stream" if kind == "stream" else "")
        return f"vllm.{kind}"

    # ---- embed (IR 1.1, `vllm.embed`) --------------------------------------------------------------

    embed_option_keys = embed.OPTION_KEYS

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        return embed.SUPPORT.problems(request)

    def lower_embed(self, request: embedding_pb2.EmbedRequest) -> HttpRequest:
        return embed.lower(request, self.provider_model or request.model, self.name)

    def lift_embed(self, request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
        return embed.lift(request, response)

    def lower_tokenize(self, request: service_pb2.TokenizeRequest) -> list[HttpRequest]:
        """`/tokenize` of context + text, and of the context alone when there is one (to find the boundary)."""
        model = self.provider_model or request.model

        def tokenize(prompt: str) -> HttpRequest:
            body = {
                "model": model,
                "prompt": prompt,
                "add_special_tokens": request.add_special_tokens,
                "return_token_strs": True,
            }
            return HttpRequest("POST", "/tokenize", orjson.dumps(body), (("content-type", "application/json"),))

        if request.WhichOneof("input") == "conversation":
            # vLLM's `/tokenize` renders messages through the model's chat template itself.
            conversation = request_pb2.Request(conversation=request.conversation)
            body = {
                "model": model,
                "messages": self._chat.body(conversation, stream=False)["messages"],
                "add_generation_prompt": request.add_generation_prompt,
                "add_special_tokens": request.add_special_tokens,
                "return_token_strs": True,
            }
            return [HttpRequest("POST", "/tokenize", orjson.dumps(body), (("content-type", "application/json"),))]
        natives = [tokenize(request.context + request.text)]
        if request.context:
            natives.append(tokenize(request.context))
        return natives

    def lower_detokenize(self, token_ids: list[int]) -> HttpRequest:
        body = {"model": self.provider_model, "tokens": token_ids}
        return HttpRequest("POST", "/detokenize", orjson.dumps(body), (("content-type", "application/json"),))

    def lift_detokenize(self, response: HttpResponse) -> str:
        text: str = common.parse_json(response.body, "detokenize body")["prompt"]
        return text

    tokenizer_info_from_refusal = True  # the vocabulary size is in a 400 only (`vocabulary`)

    def lower_tokenizer_info(self, model: str) -> list[HttpRequest]:
        return vocabulary.lower(model)

    def lift_tokenizer_info(self, responses: list[HttpResponse]) -> capabilities_pb2.TokenizerInfo:
        return vocabulary.lift(responses)

    def lift_tokenize(
        self, request: service_pb2.TokenizeRequest, responses: list[HttpResponse]
    ) -> service_pb2.TokenizeResponse:
        whole = common.parse_json(responses[0].body, "tokenize body")
        ids, pieces = whole["tokens"], whole.get("token_strs") or []
        start = 0
        straddles = False
        if len(responses) > 1:
            context_ids = common.parse_json(responses[1].body, "tokenize body")["tokens"]
            # The text's tokens start where the two tokenizations part; if they part inside the context's
            # tokens, the first returned token covers the end of the context as well.
            while start < min(len(ids), len(context_ids)) and ids[start] == context_ids[start]:
                start += 1
            straddles = start < len(context_ids)
        out = service_pb2.TokenizeResponse(token_ids=ids[start:], straddles_context=straddles)
        text = None if request.WhichOneof("input") == "conversation" else request.context + request.text
        raw = byte_level.recover(pieces, text) if pieces else None
        if raw is None:  # not byte-level symbols (or none sent): the pieces as the tokenizer spells them
            out.tokens.extend(pieces[start:] if pieces else [])
            return out
        at = 0
        for token in raw[start:]:
            out.tokens.append(byte_level.token_text(token))
            out.token_byte_offsets.append(at)
            at += len(token)
        out.token_bytes = b"".join(raw[start:])
        return out

    def token_prompt_steps(self, plan: token_prompt.Plan) -> TokenPromptSteps:
        """One round: each render through `/tokenize` with `messages` (the template with the tools and the
        generation prompt, tokenized as the chat route does: no special tokens added), and each sentinel alone."""
        headers = (("content-type", "application/json"),)
        natives = []
        for one in plan.renders:
            chat = self._chat.body(one, stream=False)
            body = {"model": chat["model"], "messages": chat["messages"], "add_generation_prompt": True}
            if "tools" in chat:
                body["tools"] = chat["tools"]
            body["add_special_tokens"] = False
            natives.append(HttpRequest("POST", "/tokenize", orjson.dumps(body), headers))
        for text in plan.sentinels:
            body = {"model": self.provider_model or plan.renders[0].model, "prompt": text, "add_special_tokens": False}
            natives.append(HttpRequest("POST", "/tokenize", orjson.dumps(body), headers))
        ids = [common.parse_json(a.body, "tokenize body")["tokens"] for a in (yield natives)]
        return ids[: len(plan.renders)], ids[len(plan.renders) :]
