"""lm-eval's `modelir` model running real lm-eval tasks (local data files) on the reference model.

The truth is computed independently of modelir's scoring code: the reference model is a byte bigram model whose
log-probability table `logprob_table()` is public, so every loglikelihood, greedy flag and bits-per-byte that
lm-eval reports can be recomputed from it.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("lm_eval")

from modelir import Model, build_request, errors
from modelir.integrations.lm_eval import ModelirLM
from modelir.transports.reference import BOS, ReferenceModel, logprob_table

from tests.integrations.lm_eval_tasks import ROOT, TASKS, TASKS_DIR, documents, responses, run_tasks


def _truth(context: str, continuation: str) -> tuple[float, bool]:
    """The reference model's log-probability of `continuation` after `context`, and whether it is greedy."""
    table = logprob_table()
    ids = [BOS, *context.encode(), *continuation.encode()]
    start = 1 + len(context.encode())
    prev, nxt = np.array(ids[start - 1 : -1]), np.array(ids[start:])
    return float(table[prev, nxt].sum()), bool(np.all(table[prev].argmax(axis=1) == nxt))


@pytest.fixture(scope="module")
def results():
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_tasks("model=reference,concurrency=4", TASKS, monkeypatch)


def test_multiple_choice_loglikelihoods_and_greedy_flags_are_the_models(results):
    docs = documents("choice.jsonl")
    correct = []
    for doc, resps in zip(docs, responses(results, "modelir_choice"), strict=True):
        scored = [tuple(r[0]) for r in resps]
        # lm-eval puts its target delimiter, a space, in front of each choice.
        truth = [_truth(doc["question"], " " + choice) for choice in doc["choices"]]
        for (logprob, greedy), (true_logprob, true_greedy) in zip(scored, truth, strict=True):
            assert logprob == pytest.approx(true_logprob, abs=1e-9)
            assert greedy == true_greedy
        correct.append(int(np.argmax([t[0] for t in truth])) == doc["answer"])
    assert results["results"]["modelir_choice"]["acc,none"] == pytest.approx(np.mean(correct))


def test_rolling_loglikelihood_gives_bits_per_byte_of_every_byte(results):
    docs = documents("documents.jsonl")
    assert any(len(d["text"].encode()) > len(d["text"]) for d in docs), "the documents must hold multi-byte text"
    table = logprob_table()
    total_logprob, total_bytes = 0.0, 0
    for doc, resps in zip(docs, responses(results, "modelir_rolling"), strict=True):
        ids = [BOS, *doc["text"].encode()]
        truth = float(table[ids[:-1], ids[1:]].sum())
        assert resps[0][0] == pytest.approx(truth, abs=1e-9)
        total_logprob += truth
        total_bytes += len(doc["text"].encode())
    reported = results["results"]["modelir_rolling"]["bits_per_byte,none"]
    assert reported == pytest.approx(-total_logprob / total_bytes / math.log(2), rel=1e-12)


def test_generate_until_is_the_models_greedy_completion_cut_at_the_stops(results):
    reference = ReferenceModel()
    matches = []
    for doc, resps in zip(documents("generate.jsonl"), responses(results, "modelir_generate"), strict=True):
        request = build_request("reference", prompt=doc["prompt"], max_output_tokens=12, temperature=0)
        request.sampling.stop.extend(["\n", "."])
        text = reference.generate(request).choices[0].message.parts[0].text
        assert resps[0][0] == text and "\n" not in text and "." not in text
        matches.append(text == doc["target"])
    assert results["results"]["modelir_generate"]["exact_match,none"] == pytest.approx(np.mean(matches))


class _CountingReference(ReferenceModel):
    """The reference model, a little slow, counting how many requests it holds at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.most_in_flight = 0

    async def run(self, request):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.02)
            return await super().run(request)
        finally:
            self.in_flight -= 1


def test_requests_run_concurrently_up_to_the_limit(monkeypatch):
    counting = _CountingReference()
    lm = ModelirLM(model=Model(counting, name="reference"), concurrency=3)
    try:
        results = run_tasks("", ["modelir_choice"], monkeypatch, model=lm)
    finally:
        lm.close()
    assert len(results["samples"]["modelir_choice"]) == 5
    assert counting.most_in_flight == 3


def test_chat_template_sends_a_conversation(monkeypatch):
    results = run_tasks("model=reference", ["modelir_generate"], monkeypatch, apply_chat_template=True)
    reference = ReferenceModel()
    for doc, resps in zip(documents("generate.jsonl"), responses(results, "modelir_generate"), strict=True):
        request = build_request("reference", messages=[("user", doc["prompt"])], max_output_tokens=12, temperature=0)
        request.sampling.stop.extend(["\n", "."])
        assert resps[0][0] == reference.generate(request).choices[0].message.parts[0].text
    assert results["config"]["model_args"] == "model=reference"


def test_an_assistant_prefix_is_prefilled_in_the_conversation(monkeypatch):
    results = run_tasks("model=reference", ["modelir_generate_prefix"], monkeypatch, apply_chat_template=True)
    reference = ReferenceModel()
    differs = []
    for doc, resps in zip(documents("generate.jsonl"), responses(results, "modelir_generate_prefix"), strict=True):
        request = build_request(
            "reference", messages=[("user", doc["prompt"])], prefill="Answer:", max_output_tokens=12, temperature=0
        )
        request.sampling.stop.extend(["\n", "."])
        assert resps[0][0] == reference.generate(request).choices[0].message.parts[0].text
        request.prefill = ""
        differs.append(resps[0][0] != reference.generate(request).choices[0].message.parts[0].text)
    assert any(differs), "the prefix must change the answers, or this test proves nothing"


def test_loglikelihood_of_a_chat_is_refused_by_name(monkeypatch):
    with pytest.raises(errors.InvalidRequestError, match="apply_chat_template"):
        run_tasks("model=reference", ["modelir_choice"], monkeypatch, apply_chat_template=True)


def test_an_unknown_generation_keyword_is_an_error_not_ignored(monkeypatch):
    with pytest.raises(errors.InvalidRequestError, match="repetition_penalty"):
        run_tasks("model=reference", ["modelir_generate"], monkeypatch, gen_kwargs="repetition_penalty=1.2")


def test_a_model_from_a_configuration_file(tmp_path, monkeypatch):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  judge:\n    transport: reference\n    limits: {max_concurrency: 2}\n")
    results = run_tasks(f"model=judge,config={config}", ["modelir_choice"], monkeypatch)
    truth = run_tasks("model=reference", ["modelir_choice"], monkeypatch)
    assert responses(results, "modelir_choice") == responses(truth, "modelir_choice")


def test_a_model_that_cannot_score_prompts_is_refused_with_the_capability_error(tmp_path, monkeypatch):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  chatty:\n    transport: reference\n    remove_capabilities: [INPUT_SCORING]\n")
    with pytest.raises(errors.UnsupportedCapabilityError, match="missing capabilities: INPUT_SCORING"):
        run_tasks(f"model=chatty,config={config}", ["modelir_choice"], monkeypatch)


def test_an_unknown_model_names_what_the_file_has(tmp_path, monkeypatch):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  judge:\n    transport: reference\n")
    with pytest.raises(ValueError, match=r"no model 'nope'.*judge"):
        run_tasks(f"model=nope,config={config}", ["modelir_choice"], monkeypatch)


def test_a_remote_model_over_grpc_gives_the_same_answers(server, results, monkeypatch):
    remote = run_tasks(f"model=reference,target={server}", ["modelir_choice", "modelir_rolling"], monkeypatch)
    for task in ("modelir_choice", "modelir_rolling"):
        assert responses(remote, task) == responses(results, task)


@pytest.mark.timeout(300)  # a fresh interpreter indexes lm-eval's built-in tasks: slow on a loaded machine
def test_the_command_line_runs_lm_eval_with_the_modelir_model(tmp_path):
    out = subprocess.run(
        [
            *(sys.executable, "-m", "modelir.integrations.lm_eval", "run", "--model", "modelir"),
            *("--model_args", "model=reference", "--tasks", "modelir_choice", "--include_path", str(TASKS_DIR)),
            *("--output_path", str(tmp_path)),
        ],
        cwd=ROOT,
        env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "modelir_choice" in out.stdout and "acc" in out.stdout
    assert list(tmp_path.rglob("results_*.json"))
