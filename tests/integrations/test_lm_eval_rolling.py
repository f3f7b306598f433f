"""lm-eval's `loglikelihood_rolling` of a document longer than the model's context: rolling windows, as lm-eval's
`max_length` promises, each request within it; and the echo-scoring route chosen in a configuration file."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")

from modelir import Model, ReferenceModel
from modelir.integrations import lm_eval as adapter
from modelir.integrations.lm_eval import ModelirLM
from modelir.v1 import capabilities_pb2

DOCUMENT = "The rolling window keeps every byte's logprob conditioned on the byte before it, as a bigram does. " * 3


class Spied(Model):
    """The reference model, remembering the size of every scoring request it runs."""

    def __init__(self, max_input_tokens: int = 0) -> None:
        manifest = ReferenceModel().manifest()
        manifest.limits.max_input_tokens = max_input_tokens
        super().__init__(ReferenceModel(), name="reference", manifest=manifest)
        self.sizes: list[int] = []

    async def arun(self, request, *, deadline=None):
        continuation = sum(len(c.token_ids.ids) or len(c.text.encode()) for c in request.input_scoring.continuations)
        self.sizes.append(len(request.token_ids.ids) + len(request.prompt.encode()) + continuation)
        return await super().arun(request, deadline=deadline)


def _rolling(lm: ModelirLM, text: str) -> float:
    try:
        return lm.loglikelihood_rolling([SimpleNamespace(args=(text,))], disable_tqdm=True)[0]
    finally:
        lm.close()


@pytest.mark.parametrize("where", ["model_args", "manifest"])
def test_a_long_document_is_scored_in_windows_that_fit(where):
    whole = _rolling(ModelirLM(model=Spied()), DOCUMENT)  # no limit: the document in one request
    model = Spied(max_input_tokens=32 if where == "manifest" else 0)
    lm = ModelirLM(model=model, **({"max_length": 32} if where == "model_args" else {}))
    assert lm.max_length == 32
    rolled = _rolling(lm, DOCUMENT)
    assert len(model.sizes) > len(DOCUMENT.encode()) // 32 and max(model.sizes) <= 32
    # A bigram model conditions each byte on the one before it only: the windows add up to the whole score.
    assert rolled == pytest.approx(whole, abs=1e-3)


def test_a_short_document_goes_whole():
    model = Spied(max_input_tokens=4096)
    _rolling(ModelirLM(model=model), "short")
    assert len(model.sizes) == 1


def test_the_echo_scoring_route_is_chosen_in_the_configuration(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        textwrap.dedent(
            """
            models:
              tiny: {transport: openai_completions, base_url: "http://127.0.0.1:9/v1", echo_scoring: true}
              plain: {transport: openai_completions, base_url: "http://127.0.0.1:9/v1"}
            """
        )
    )
    scoring = capabilities_pb2.CAPABILITY_INPUT_SCORING
    opened = adapter.open_model("tiny", config=str(config))
    plain = adapter.open_model("plain", config=str(config))
    assert scoring in opened.model.capabilities.capabilities
    assert scoring not in plain.model.capabilities.capabilities
    lm = ModelirLM(model="tiny", config=str(config))
    try:
        assert scoring in lm._manifest.capabilities  # the adapter scores through the echo route
    finally:
        lm.close()
