"""Anthropic reasoning: a request's effort or budget as `thinking` and `output_config.effort`, per model.

Reasoning effort (Anthropic's effort and adaptive-thinking guides, https://platform.claude.com/docs/en/build-with-claude/
effort): the models in `EFFORT_MODELS` take an effort natively as `output_config.effort` (`low`, `medium`,
`high`). Those in `ADAPTIVE_THINKING_MODELS` (Opus 4.6, Sonnet 4.6, Opus 4.7) think adaptively, so an effort is sent
as `thinking: {"type": "adaptive"}` plus the effort, nothing mapped. Every other model (Opus 4.5 included, which
takes an effort but thinks only under a budget) takes a thinking budget, so an effort is sent as the budget
`EFFORT_BUDGETS` gives it (and, on Opus 4.5, as the effort too), and the response carries a
`reasoning_effort_mapped` warning saying so. A thinking budget on a model in `BUDGETLESS_MODELS` (Opus 4.7, which
answers 400 to one) is refused up front.

| IR effort | adaptive models | other models: thinking budget (warned) |
|---|---|---|
| `minimal` | effort `low` (warned: there is no minimal) | 1,024 |
| `low` | effort `low` | 2,048 |
| `medium` | effort `medium` | 8,192 |
| `high` | effort `high` | 16,384 |
| `none` | no thinking | no thinking |
"""

from __future__ import annotations

from modelir.v1 import errors_pb2, request_pb2

MIN_THINKING_BUDGET = 1024
# Model id prefixes, from Anthropic's effort and adaptive-thinking guides.
ADAPTIVE_THINKING_MODELS = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7")
EFFORT_MODELS = (*ADAPTIVE_THINKING_MODELS, "claude-opus-4-5")
BUDGETLESS_MODELS = ("claude-opus-4-7",)
_NATIVE_EFFORT = {
    request_pb2.REASONING_EFFORT_MINIMAL: "low",
    request_pb2.REASONING_EFFORT_LOW: "low",
    request_pb2.REASONING_EFFORT_MEDIUM: "medium",
    request_pb2.REASONING_EFFORT_HIGH: "high",
}
EFFORT_BUDGETS = {
    request_pb2.REASONING_EFFORT_MINIMAL: MIN_THINKING_BUDGET,
    request_pb2.REASONING_EFFORT_LOW: 2048,
    request_pb2.REASONING_EFFORT_MEDIUM: 8192,
    request_pb2.REASONING_EFFORT_HIGH: 16384,
}


def native_effort(request: request_pb2.Request, model: str) -> str | None:
    """The `output_config.effort` to send: the request's effort, on a model that takes one."""
    if request.reasoning_controls.WhichOneof("amount") != "effort":
        return None
    if not model.startswith(EFFORT_MODELS):
        return None
    return _NATIVE_EFFORT.get(request.reasoning_controls.effort)


def thinking_budget(request: request_pb2.Request, model: str) -> int | None:
    """The thinking budget to send: the request's own, or its effort's (`EFFORT_BUDGETS`) on a model that does
    not think adaptively; None when no budget goes on the wire."""
    amount = request.reasoning_controls.WhichOneof("amount")
    if amount == "budget_tokens":
        return request.reasoning_controls.budget_tokens
    if amount == "effort" and not model.startswith(ADAPTIVE_THINKING_MODELS):
        return EFFORT_BUDGETS.get(request.reasoning_controls.effort)
    return None


def warnings(request: request_pb2.Request, model: str) -> list[errors_pb2.Warning]:
    """What the lowering did to the request's effort, said in the response (never silently)."""
    if request.reasoning_controls.WhichOneof("amount") != "effort":
        return []
    effort = request_pb2.ReasoningEffort.Name(request.reasoning_controls.effort)
    native, budget = native_effort(request, model), thinking_budget(request, model)
    model = model or "this model"
    if budget is not None:
        sent = f"thinking.budget_tokens = {budget}" + (f" with effort {native!r}" if native else "")
        message = f"{model} thinks under a budget, not an effort: {effort} was sent as {sent} (EFFORT_BUDGETS)."
    elif native is not None and request.reasoning_controls.effort == request_pb2.REASONING_EFFORT_MINIMAL:
        message = f"{model} has no minimal effort: {effort} was sent as effort {native!r}."
    else:
        return []
    return [errors_pb2.Warning(code="reasoning_effort_mapped", message=message)]
