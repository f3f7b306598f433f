"""Inspect AI on any modelir model: the `modelir` model provider (`inspect eval ... --model modelir/<name>`).

    inspect eval task.py --model modelir/reference
    inspect eval task.py --model modelir/tiny -M config_file=models.yaml  # a model from a configuration file
    inspect eval task.py --model modelir/tiny -M target=localhost:50051   # a model on a modelir server

Inspect finds the provider through the `inspect_ai` entry point of the modelir package, which imports this module.
Messages, tools, tool choice and `GenerateConfig` become one IR `Request`; the IR `Response` becomes a
`ModelOutput`. Whatever the model's manifest lacks, modelir refuses with its capability error before any call;
whatever `GenerateConfig` asks that the IR cannot say is refused here, by field name; nothing is dropped.

Reasoning survives agent loops: each reasoning part travels in `ContentReasoning.signature` as the IR part itself
(text, summaries, opaque artifacts with their issuer, item id), so the next turn replays it byte for byte to the
issuer. Artifacts on text parts ride in `ContentText.internal`, those on tool calls in the assistant message's
metadata. A signature that modelir did not issue becomes a foreign artifact, which modelir's foreign-artifact
policy decides about (by default: rejected, naming it).
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import (
    ChatMessage,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    modelapi,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from modelir import errors
from modelir.integrations._inspect_output import to_output
from modelir.integrations._inspect_request import to_request
from modelir.integrations._models import OpenedModel, open_model

__all__ = ["ModelirAPI", "to_output", "to_request"]


@modelapi(name="modelir")
class ModelirAPI(ModelAPI):
    """One modelir model (`modelir/<name>`), from a configuration file, a gRPC server or the built-in models."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008  (Inspect's own signature)
        **model_args: Any,
    ) -> None:
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)
        unknown = set(model_args) - {"config_file", "target", "token_env"}
        if unknown:
            raise ValueError(f"modelir: unknown model argument(s) {', '.join(sorted(unknown))}")
        if base_url:
            raise ValueError("modelir: name the model's server with -M target=host:port, not a base URL")
        # `config_file`, not `config`: Inspect's own `config` is the GenerateConfig.
        self._where = {
            "config": model_args.get("config_file"),
            "target": model_args.get("target"),
            "token_env": model_args.get("token_env"),
        }
        self._opened: OpenedModel | None = None

    async def _model(self) -> OpenedModel:
        if self._opened is None:  # opened on Inspect's loop: clients and channels belong to one loop
            self._opened = open_model(self.model_name, **self._where)
        return self._opened

    async def aclose(self) -> None:
        if self._opened is not None:
            await self._opened.aclose()
            self._opened = None

    def should_retry(self, ex: Exception) -> bool:
        return isinstance(ex, errors.ModelError) and ex.retryable

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        model = (await self._model()).model
        request = to_request(self.model_name, input, tools, tool_choice, config)
        response = await model.arun(request)
        if bool(response.errors) and not response.choices:
            raise errors.ModelError(f"{self.model_name}: {response.errors[0].message}")
        return to_output(response, self.model_name)
