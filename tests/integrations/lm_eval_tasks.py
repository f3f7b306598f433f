"""Run the repository's lm-eval tasks (defined in `lm_eval_tasks/`, over local files) on a modelir model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TASKS_DIR = ROOT / "tests/integrations/lm_eval_tasks"
TASKS = ["modelir_choice", "modelir_rolling", "modelir_generate"]


def documents(task_file: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TASKS_DIR / task_file).read_text().splitlines() if line.strip()]


def run_tasks(model_args: str, tasks: list[str], monkeypatch, model: Any = "modelir", **options: Any) -> dict[str, Any]:
    """`lm_eval.simple_evaluate` with the `modelir` model, offline, from the repository root, samples logged."""
    import lm_eval
    import modelir.integrations.lm_eval  # noqa: F401  (registers `modelir`)
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(ROOT)  # the tasks name their data files relative to the repository root
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=tasks,
        # Only the repository's tasks: indexing lm-eval's thousands of built-in ones costs seconds per run.
        task_manager=TaskManager(include_path=str(TASKS_DIR), include_defaults=False),
        log_samples=True,
        **options,
    )


def responses(results: dict[str, Any], task: str) -> list[Any]:
    """The model's raw answers for each sample of `task`, in document order."""
    samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
    return [sample["resps"] for sample in samples]
