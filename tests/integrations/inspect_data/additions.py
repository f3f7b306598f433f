"""An Inspect task over a local dataset: the model must call the `add` tool; scored by the tool's result.

inspect eval tests/integrations/inspect_data/additions.py --model modelir/reference -T reasoning_effort=low
"""

from __future__ import annotations

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, GenerateConfig
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import tool

DATA = Path(__file__).parent / "additions.jsonl"


@tool
def add():
    async def execute(x: int, y: int) -> int:
        """Add two integers.

        Args:
            x: The first integer.
            y: The second integer.
        """
        return x + y

    return execute


@scorer(metrics=[accuracy()])
def tool_result_is_the_sum():
    """Correct when the model called `add` and the tool result it got back is the sum of the arguments it sent."""

    async def score(state: TaskState, target: Target) -> Score:
        calls = [c for m in state.messages if isinstance(m, ChatMessageAssistant) for c in m.tool_calls or ()]
        results = [m for m in state.messages if isinstance(m, ChatMessageTool)]
        if not calls or not results or calls[0].function != target.text:
            return Score(value=INCORRECT, explanation="no call of the target tool")
        expected = calls[0].arguments["x"] + calls[0].arguments["y"]
        return Score(value=CORRECT if results[0].text == str(expected) else INCORRECT, answer=results[0].text)

    return score


def additions_task(config: GenerateConfig | None = None) -> Task:
    return Task(
        dataset=json_dataset(str(DATA)),
        solver=[use_tools(add()), generate()],
        scorer=tool_result_is_the_sum(),
        config=config or GenerateConfig(),
    )


@task
def additions(reasoning_effort: str | None = None) -> Task:
    return additions_task(GenerateConfig(reasoning_effort=reasoning_effort, max_tokens=64, temperature=0.0, seed=3))
