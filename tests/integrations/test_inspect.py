"""Inspect AI's `modelir` provider in real Inspect evals on the reference model: a local dataset, a tool-using
solver, a scorer, reasoning that must survive the agent loop, logprobs, and refusals by capability."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import Task, eval
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageUser,
    ContentReasoning,
    GenerateConfig,
    get_model,
)
from modelir.errors import ForeignArtifactError

from tests.integrations.inspect_data.additions import additions_task


def _eval(task: Task, model: str, tmp_path, **model_args):
    (log,) = eval(task, model=model, model_args=model_args, log_dir=str(tmp_path), display="none")
    return log


def test_a_tool_using_eval_with_reasoning_runs_the_agent_loop(tmp_path):
    config = GenerateConfig(reasoning_effort="low", max_tokens=64, temperature=0.0, seed=3)
    log = _eval(additions_task(config), "modelir/reference", tmp_path)
    assert log.status == "success", log.error
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    assert len(log.samples) == 3
    for sample in log.samples:
        assistants = [m for m in sample.messages if isinstance(m, ChatMessageAssistant)]
        # The first turn called the tool; the second turn answered after the result, with its own reasoning, so
        # the first turn's reasoning went back to the reference model, which checks its signature.
        assert len(assistants) >= 2 and assistants[0].tool_calls
        for message in assistants:
            reasoning = [c for c in message.content if isinstance(c, ContentReasoning)]
            assert reasoning and reasoning[0].reasoning and reasoning[0].signature.startswith("modelir:")
        assert sample.output.usage.input_tokens > 0 and sample.output.usage.reasoning_tokens > 0


def test_the_same_eval_on_a_model_served_over_grpc(server, tmp_path):
    config = GenerateConfig(reasoning_effort="low", max_tokens=64, temperature=0.0, seed=3)
    log = _eval(additions_task(config), "modelir/reference", tmp_path, target=server)
    assert log.status == "success", log.error
    assert log.results.scores[0].metrics["accuracy"].value == 1.0


def test_tampered_reasoning_is_refused_by_its_issuer(tmp_path):
    from inspect_ai.model import ChatMessageUser, get_model

    model = get_model("modelir/reference", config=GenerateConfig(reasoning_effort="low", max_tokens=32))

    async def two_turns():
        first = await model.generate([ChatMessageUser(content="Hello")])
        reasoning = next(c for c in first.message.content if isinstance(c, ContentReasoning))
        reasoning.reasoning += " (edited)"
        await model.generate([ChatMessageUser(content="Hello"), first.message, ChatMessageUser(content="Again")])

    with pytest.raises(ForeignArtifactError, match="signature check"):
        asyncio.run(two_turns())


def test_logprobs_come_back_with_bytes_and_alternatives(tmp_path):
    model = get_model("modelir/reference", config=GenerateConfig(logprobs=True, top_logprobs=3, max_tokens=8))

    output = asyncio.run(model.generate([ChatMessageUser(content="Say café")]))
    logprobs = output.choices[0].logprobs.content
    assert len(logprobs) == output.usage.output_tokens
    assert b"".join(bytes(p.bytes) for p in logprobs).decode("utf-8", "replace") == output.completion
    assert all(len(p.top_logprobs) == 3 and p.logprob <= 0 for p in logprobs)


def test_what_the_manifest_lacks_is_refused_with_the_capability_error(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  no-tools:\n    transport: reference\n    remove_capabilities: [TOOLS, TOOL_CHOICE]\n")
    log = _eval(additions_task(), "modelir/no-tools", tmp_path, config_file=str(config))
    assert log.status == "error"
    assert "model 'no-tools' cannot run this request: missing capabilities: TOOLS" in log.error.message


def test_generate_config_without_an_ir_counterpart_is_refused_by_name(tmp_path):
    log = _eval(additions_task(GenerateConfig(logit_bias={1: 2.0})), "modelir/reference", tmp_path)
    assert log.status == "error"
    assert "GenerateConfig.logit_bias" in log.error.message
