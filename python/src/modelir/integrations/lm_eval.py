"""lm-evaluation-harness on any modelir model: the `modelir` model type (`lm_eval --model modelir`).

    python -m modelir.integrations.lm_eval run --model modelir --model_args model=reference --tasks ...
    python -m modelir.integrations.lm_eval run --model modelir \\
        --model_args model=tiny,config=models.yaml,concurrency=8 --tasks ...   # a model from a config file
    python -m modelir.integrations.lm_eval run --model modelir \\
        --model_args model=tiny,target=localhost:50051 --tasks ...            # a model on a modelir server

Importing this module registers `modelir` with lm-eval (`register_model`); lm-eval 0.4 has no plugin discovery,
so `python -m modelir.integrations.lm_eval` is lm-eval's own command line with that import done first, and
`lm_eval.simple_evaluate(model="modelir", ...)` works in any program that imported it; so does
`lm_eval.simple_evaluate(model=ModelirLM(model=any_modelir_model), ...)`.

- `loglikelihood` scores each continuation after its context with the IR's input scoring (one request per pair:
  the IR scores one continuation per request); `greedy` says whether every scored token was the most likely one
  at its position (the top-1 alternative the same request returns).
- `loglikelihood_rolling` scores the whole document; the model's own tokenizer and its beginning-of-sequence token
  decide what the first token is conditioned on. A document longer than `max_length` tokens (the model argument,
  else the manifest's `limits.max_input_tokens`) is scored in rolling windows, as lm-eval's own models do: its
  token ids are cut by lm-eval's `get_rolling_token_windows` / `make_disjoint_window`, each window scored as token
  ids after its context (every request at most `max_length` ids), the sums added. The first window is conditioned
  on the model's BOS token (its EOS where it has none). Needs TOKENIZE and TOKEN_INPUT beside INPUT_SCORING.
- Scoring through an OpenAI-completions server that echoes prompt logprobs (llama-cpp-python's, say) is selected in
  the configuration file: `transport: openai_completions` with `echo_scoring: true` claims INPUT_SCORING.
- `generate_until` runs a completion (or, with `--apply_chat_template`, a conversation) with the task's stop
  sequences and sampling controls; an unknown generation keyword is an error, never ignored.
- Requests run concurrently, at most `concurrency` at a time, through a modelir `Limiter`, with a progress bar.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

# lm-eval and tqdm ship no type information.
from lm_eval.api.model import LM  # type: ignore[import-untyped]
from lm_eval.api.registry import register_model  # type: ignore[import-untyped]
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # type: ignore[import-untyped]
from tqdm import tqdm  # type: ignore[import-untyped]

from modelir import errors
from modelir.integrations._models import OpenedModel, open_model
from modelir.interface import ModelInterface, build_request, message
from modelir.limiter import Limiter
from modelir.v1 import capabilities_pb2, content_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2

log = logging.getLogger(__name__)
_C = capabilities_pb2.Capability
T = TypeVar("T")
# `apply_chat_template` returns the conversation as JSON after this marker; `generate_until` turns it back into
# messages, so the model's provider (not a local template) renders the chat.
_CHAT_MARKER = "\x00modelir-chat\x00"
# How much a scored token's logprob may fall short of the best alternative's and still count as the greedy choice:
# both travel as float32 on most wires.
_GREEDY_TOLERANCE = 1e-5
_GEN_KWARGS = {"until", "max_gen_toks", "do_sample", "temperature", "top_p", "top_k", "seed"}


class ModelirLM(LM):  # type: ignore[misc]  # lm-eval ships no types: its `LM` is `Any` to mypy
    """One modelir model, local or remote, as an lm-eval model."""

    def __init__(
        self,
        model: str | ModelInterface = "reference",
        config: str | None = None,
        target: str | None = None,
        token_env: str | None = None,
        concurrency: int = 8,
        max_gen_toks: int = 256,
        seed: int | None = None,
        max_length: int | None = None,
        # lm-eval passes these to every model type; batching here is the limiter's concurrency.
        batch_size: int | str | None = None,
        max_batch_size: int | None = None,
        device: str | None = None,
    ) -> None:
        super().__init__()
        if int(concurrency) < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.model_name = model if isinstance(model, str) else model.name
        self.max_gen_toks = int(max_gen_toks)
        self.seed = seed
        # One loop for the LM's lifetime: the model's HTTP clients and gRPC channels belong to the loop that made them.
        self._loop = asyncio.new_event_loop()
        self._limiter = Limiter(max_concurrency=int(concurrency))
        if isinstance(model, str):
            self._opened: OpenedModel = self._loop.run_until_complete(
                _in_loop(lambda: open_model(model, config=config, target=target, token_env=token_env))
            )
        else:  # a model built in Python (`ModelirLM(model=Model(...))`), which its builder closes
            self._opened = OpenedModel(model, owned=False)
        self.model = self._opened.model
        self._manifest = self._loop.run_until_complete(self.model.acapabilities())
        self._warned_unscored = False
        # The most token ids one scoring request may hold: lm-eval's `max_length`.
        self._max_length = int(max_length) if max_length else (self._manifest.limits.max_input_tokens or None)
        if self._max_length is not None and self._max_length < 2:
            raise ValueError(f"max_length must be at least 2 (a context token and a scored one), not {max_length}")

    @property
    def max_length(self) -> int | None:
        """The most tokens one request may hold (None: not known, documents go whole)."""
        return self._max_length

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._opened.aclose())
            self._loop.close()

    # ---- lm-eval's request types ---------------------------------------------------------------------

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [tuple(r.args) for r in requests]
        for context, _ in pairs:
            if context.startswith(_CHAT_MARKER):
                raise _invalid(
                    "input_scoring",
                    "the IR scores a text prompt, not a conversation: run loglikelihood tasks without "
                    "--apply_chat_template",
                )
        results = self._run_all(
            [partial(self._loglikelihood, c, x) for c, x in pairs], "modelir loglikelihood", disable_tqdm
        )
        for (context, continuation), result in zip(pairs, results, strict=True):
            self.cache_hook.add_partial("loglikelihood", (context, continuation), result)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        texts = [r.args[0] for r in requests]
        results = self._run_all(
            [partial(self._rolling, t) for t in texts], "modelir loglikelihood_rolling", disable_tqdm
        )
        for text, result in zip(texts, results, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), result)
        return results

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        calls = [tuple(r.args) for r in requests]
        results = self._run_all(
            [partial(self._generate, c, k) for c, k in calls], "modelir generate_until", disable_tqdm
        )
        for (context, gen_kwargs), result in zip(calls, results, strict=True):
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), result)
        return results

    # ---- chat templates: the provider renders them ----------------------------------------------------

    @property
    def tokenizer_name(self) -> str:
        return f"modelir/{self.model_name}"

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return ""  # no local template: the conversation goes to the model as messages

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return _CHAT_MARKER + json.dumps({"messages": chat_history, "add_generation_prompt": add_generation_prompt})

    # ---- one request each -----------------------------------------------------------------------------

    async def _loglikelihood(self, context: str, continuation: str) -> tuple[float, bool]:
        request = build_request(self.model_name, prompt=context, max_output_tokens=1)
        request.input_scoring.continuations.add(text=continuation)
        request.input_scoring.top_logprob_count = 1
        scores = (await self._scored(request)).input_scores[0]
        return scores.logprob_sum, _greedy(scores.tokens)

    async def _rolling(self, text: str) -> float:
        have = set(self._manifest.capabilities)
        if self._max_length is not None and {_C.CAPABILITY_TOKENIZE, _C.CAPABILITY_TOKEN_INPUT} <= have:
            tokens = list((await self.model.atokenize(text)).token_ids)
            if len(tokens) + 1 > self._max_length:  # with the token the first one is conditioned on
                return await self._rolling_windows(tokens)
        request = build_request(self.model_name, prompt=text, max_output_tokens=1)
        request.input_scoring.SetInParent()
        scores = (await self._scored(request)).input_scores[0]
        unscored_bytes = len(text.encode()) - scores.scored_byte_count
        if unscored_bytes and not self._warned_unscored:
            # No BOS in front, or a wire that gives the first prompt token no logprob (OpenAI's echo convention).
            self._warned_unscored = True
            log.warning(
                "%s: the first token of a document comes back without a logprob: loglikelihood_rolling sums the "
                "tokens after its first %d byte(s)",
                self.model_name,
                unscored_bytes,
            )
        return scores.logprob_sum

    async def _rolling_windows(self, tokens: list[int]) -> float:
        """lm-eval's rolling windows over the document's ids: each window's continuation scored after its context,
        one request of at most `max_length` ids each (context and continuation together)."""
        assert self._max_length is not None
        prefix = await self._prefix_token()
        windows = get_rolling_token_windows(
            token_list=tokens, prefix_token=prefix, max_seq_len=self._max_length - 1, context_len=1
        )
        total = 0.0
        for context, continuation in map(make_disjoint_window, windows):
            request = build_request(self.model_name, token_ids=context, max_output_tokens=1)
            request.input_scoring.continuations.add().token_ids.ids.extend(continuation)
            scores = (await self._scored(request)).input_scores[0]
            if scores.scored_token_count != len(continuation):
                raise errors.ModelError(
                    f"{self.model_name}: a rolling window scored {scores.scored_token_count} of "
                    f"{len(continuation)} tokens"
                )
            total += scores.logprob_sum
        return total

    async def _prefix_token(self) -> int:
        """What the first window is conditioned on: the model's BOS token, else its (first) EOS token."""
        info = await self.model.atokenizer_info()
        if info is not None and info.HasField("bos_token_id"):
            return info.bos_token_id
        if info is not None and info.eos_token_ids:
            return info.eos_token_ids[0]
        raise errors.ModelError(
            f"{self.model_name}: a document longer than max_length={self._max_length} is scored in rolling windows, "
            "whose first is conditioned on the BOS (or EOS) token, and the model does not say which token that is"
        )

    async def _scored(self, request: request_pb2.Request) -> response_pb2.Response:
        response = await self.model.arun(request)
        if bool(response.errors):
            raise errors.ModelError(f"{self.model_name}: input scoring failed: {response.errors[0].message}")
        return response

    async def _generate(self, context: str, gen_kwargs: dict[str, Any]) -> str:
        unknown = set(gen_kwargs) - _GEN_KWARGS
        if unknown:
            raise _invalid(
                "generation_kwargs",
                f"unsupported keyword(s) {', '.join(sorted(unknown))}; modelir maps {', '.join(sorted(_GEN_KWARGS))}",
            )
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        request = self._generation_request(context)
        s = request.sampling
        s.max_output_tokens = int(gen_kwargs.get("max_gen_toks", self.max_gen_toks))
        if not gen_kwargs.get("do_sample", False):
            s.temperature = 0.0
        elif "temperature" in gen_kwargs:
            s.temperature = float(gen_kwargs["temperature"])
        if "top_p" in gen_kwargs:
            s.top_p = float(gen_kwargs["top_p"])
        if "top_k" in gen_kwargs:
            s.top_k = int(gen_kwargs["top_k"])
        seed = gen_kwargs.get("seed", self.seed)
        if seed is not None:
            s.seed = int(seed)
        # The model stops at as many of the stop sequences as it takes; the text is cut at the first of any of
        # them here, which is what stopping at all of them gives.
        limit = self._manifest.limits.max_stop_sequences or len(until)
        s.stop.extend(until[:limit])
        response = await self.model.arun(request)
        if bool(response.errors):
            raise errors.ModelError(f"{self.model_name}: generation failed: {response.errors[0].message}")
        text = "".join(p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text")
        return _cut_at_first(text, until)

    def _generation_request(self, context: str) -> request_pb2.Request:
        if not context.startswith(_CHAT_MARKER):  # a chat-only model rejects it, naming COMPLETION
            return build_request(self.model_name, prompt=context)
        chat, end = json.JSONDecoder().raw_decode(context, len(_CHAT_MARKER))
        messages = [message(m["role"], m["content"]) for m in chat["messages"]]
        prefill = context[end:]  # anything lm-eval appended after the rendered chat continues the assistant turn
        if not chat["add_generation_prompt"] and messages and messages[-1].role == content_pb2.ROLE_ASSISTANT:
            prefill = messages.pop().parts[0].text + prefill
        return build_request(self.model_name, messages=messages, prefill=prefill)

    # ---- concurrency and progress ---------------------------------------------------------------------

    def _run_all(self, calls: Sequence[Callable[[], Awaitable[T]]], what: str, disable_tqdm: bool) -> list[T]:
        async def run_all() -> list[T]:
            with tqdm(total=len(calls), desc=what, disable=disable_tqdm) as bar:

                async def one(call: Callable[[], Awaitable[T]]) -> T:
                    async with self._limiter.acquire():
                        result = await call()
                    bar.update(1)
                    return result

                return list(await asyncio.gather(*(one(call) for call in calls)))

        return self._loop.run_until_complete(run_all())


def _greedy(tokens: logprobs_pb2.TokenLogprobs) -> bool:
    """Whether each scored token was the most likely one at its position (by the top-1 alternative)."""
    if len(tokens.top_counts) != len(tokens.token_logprobs):
        raise errors.ModelError("the model returned no top-1 alternatives for the scored tokens")
    start = 0
    for logprob, count in zip(tokens.token_logprobs, tokens.top_counts, strict=True):
        best = max(tokens.top_logprobs[start : start + count], default=-math.inf)
        start += count
        if logprob < best - _GREEDY_TOLERANCE:
            return False
    return True


def _invalid(field: str, description: str) -> errors.InvalidRequestError:
    return errors.InvalidRequestError([errors_pb2.FieldViolation(field=field, description=description)])


def _cut_at_first(text: str, stops: Sequence[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


async def _in_loop(make: Callable[[], T]) -> T:
    return make()


if __name__ != "__main__":  # run as `python -m`, main() imports the module by its name, which registers it once
    register_model("modelir")(ModelirLM)


def main() -> None:
    """lm-eval's own command line, with the `modelir` model registered."""
    import importlib

    from lm_eval.__main__ import cli_evaluate  # type: ignore[import-untyped]

    importlib.import_module("modelir.integrations.lm_eval")
    cli_evaluate()


if __name__ == "__main__":
    main()
