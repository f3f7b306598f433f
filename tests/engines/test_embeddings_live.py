"""Embeddings (IR 1.1) live: Ollama's `/api/embed`, llama-server's `/v1/embeddings` (a second instance, started with
`--embeddings --pooling mean`) and vLLM's `/v1/embeddings` (a pooling runner), each on the project's tiny model.

Each engine's vectors are checked against the numpy truth (`numpy_truth.hidden_states`: the final normed hidden
states, pooled as the engine documents it) to 1e-3 (the engines compute in float32), and modelir's result against
the engine's own answer to the same request sent by hand with JSON floats, exactly (float32). Run with
`make test-engines`; each part skips unless its engine's MODELIR_* variable is set.
"""

from __future__ import annotations

import os

import httpx
import numpy as np
import pytest
from modelir import Model, errors
from modelir.http.executor import Executor
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.transports.vllm import VLLM
from modelir.v1 import embedding_pb2, request_pb2

from tests.engines import launch, numpy_truth

SERVER = os.environ.get("MODELIR_LLAMA_SERVER")
OLLAMA = os.environ.get("MODELIR_OLLAMA")
TOLERANCE = 1e-3  # float32 engines against the float64 truth
NONE = embedding_pb2.EMBED_NORMALIZATION_NONE
L2 = embedding_pb2.EMBED_NORMALIZATION_L2
needs_llama = pytest.mark.skipif(not SERVER, reason="set MODELIR_LLAMA_SERVER (make test-engines sets it)")
needs_ollama = pytest.mark.skipif(not (OLLAMA and SERVER), reason="set MODELIR_OLLAMA and MODELIR_LLAMA_SERVER")


def _texts(*texts: str, **fields) -> embedding_pb2.EmbedRequest:
    return embedding_pb2.EmbedRequest(inputs=[embedding_pb2.EmbedInput(text=t) for t in texts], **fields)


def _ids(*inputs: list[int], **fields) -> embedding_pb2.EmbedRequest:
    inputs_ = [embedding_pb2.EmbedInput(token_ids=request_pb2.TokenIds(ids=ids)) for ids in inputs]
    return embedding_pb2.EmbedRequest(inputs=inputs_, **fields)


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def _float32(values) -> list[float]:
    return np.asarray(values, dtype=np.float32).tolist()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """llama-server with embeddings on, mean pooling (the tiny GGUF names no pooling of its own)."""
    assert SERVER is not None
    folder = tmp_path_factory.mktemp("llama-embed")
    with launch.llama_server(SERVER, folder, "--embeddings", "--pooling", "mean") as url:
        yield url


@pytest.fixture
async def llama_model(llama):
    executor = Executor(llama)
    yield Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor)
    await executor.aclose()


def _tokenize(llama: str, text: str) -> list[int]:
    """The tiny model's tokens for `text` with its special tokens (BOS), as every engine here adds them."""
    answer = httpx.post(llama + "/tokenize", json={"content": text, "add_special": True}).json()
    return [t if isinstance(t, int) else t["id"] for t in answer["tokens"]]


# ---- llama-server ---------------------------------------------------------------------------------------------------


@needs_llama
async def test_llama_server_mean_pooling_matches_the_truth_unscaled_and_scaled(llama_model):
    inputs = ([353, 72, 101, 108, 108, 111], [72, 101])
    unscaled = await llama_model.aembed(_ids(*inputs, normalization=NONE))
    scaled = await llama_model.aembed(_ids(*inputs, normalization=L2))
    for ids, plain, unit in zip(inputs, unscaled.embeddings, scaled.embeddings, strict=True):
        truth = numpy_truth.hidden_states(ids).mean(0)
        assert np.allclose(plain.values, truth, atol=TOLERANCE)
        assert np.allclose(unit.values, _unit(truth), atol=TOLERANCE)
    assert unscaled.usage.input_token_count == sum(map(len, inputs))


@needs_llama
async def test_llama_server_text_and_token_inputs_in_one_call(llama, llama_model):
    ids = _tokenize(llama, "Hello world")
    out = await llama_model.aembed(
        embedding_pb2.EmbedRequest(
            inputs=[
                embedding_pb2.EmbedInput(text="Hello world"),
                embedding_pb2.EmbedInput(token_ids=request_pb2.TokenIds(ids=ids)),
            ],
            normalization=NONE,
        )
    )
    text, tokens = out.embeddings
    assert list(text.values) == list(tokens.values)  # the text is embedded as exactly those tokens
    assert np.allclose(text.values, numpy_truth.hidden_states(ids).mean(0), atol=TOLERANCE)


@needs_llama
async def test_llama_server_result_equals_its_own_float_answer_exactly(llama, llama_model):
    request = _ids([353, 72, 101], normalization=L2)
    out = await llama_model.aembed(request)
    async with httpx.AsyncClient() as client:
        answer = await client.post(llama + "/v1/embeddings", json={"input": [[353, 72, 101]], "embd_normalize": 2})
    raw = answer.json()
    assert list(out.embeddings[0].values) == _float32(raw["data"][0]["embedding"])
    assert out.usage.input_token_count == raw["usage"]["prompt_tokens"] == 3
    assert not out.warnings  # every member of the answer accounted for


@needs_llama
async def test_llama_server_refuses_an_over_long_input_as_truncation_none_says(llama_model):
    request = _ids([72] * 300, truncation=embedding_pb2.EMBED_TRUNCATION_NONE)  # the context is 256
    with pytest.raises(errors.ProviderRejectedError, match="too large"):  # a 500 from the server, not retried
        await llama_model.aembed(request)


@needs_llama
async def test_llama_server_without_embeddings_is_a_typed_refusal(tmp_path):
    assert SERVER is not None
    with launch.llama_server(SERVER, tmp_path) as url:
        executor = Executor(url)
        try:
            model = Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor)
            with pytest.raises(errors.ProviderRejectedError, match="--embeddings"):
                await model.aembed(_texts("Hello"))
        finally:
            await executor.aclose()


# ---- Ollama ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ollama(tmp_path_factory):
    assert OLLAMA is not None
    with launch.ollama(OLLAMA, tmp_path_factory.mktemp("ollama-embed")) as url:
        yield url


@pytest.fixture
async def ollama_model(ollama):
    executor = Executor(ollama)
    yield Model(Ollama(provider_model="tiny"), name="tiny", executor=executor)
    await executor.aclose()


@needs_ollama
async def test_ollama_embeds_the_last_token_scaled_to_unit_length(llama, ollama, ollama_model):
    """Ollama's llama runner on a model with no pooling of its own returns the last token's hidden state
    (`GetEmbeddingsIth` of the last position) and scales every vector to unit length (`EmbedHandler`)."""
    texts = ("Hello world", "the cat")
    out = await ollama_model.aembed(_texts(*texts, normalization=L2))
    for text, vector in zip(texts, out.embeddings, strict=True):
        truth = _unit(numpy_truth.hidden_states(_tokenize(llama, text))[-1])
        assert np.allclose(vector.values, truth, atol=TOLERANCE)
    assert out.usage.input_token_count == sum(len(_tokenize(llama, t)) for t in texts)
    async with httpx.AsyncClient() as client:
        raw = (await client.post(ollama + "/api/embed", json={"model": "tiny", "input": list(texts)})).json()
    assert [list(e.values) for e in out.embeddings] == [_float32(v) for v in raw["embeddings"]]
    assert not out.warnings


@needs_ollama
async def test_ollama_dimensions_keep_the_first_components_scaled_again(llama, ollama_model):
    out = await ollama_model.aembed(_texts("Hello world", dimension_count=8))
    truth = numpy_truth.hidden_states(_tokenize(llama, "Hello world"))[-1]
    assert np.allclose(out.embeddings[0].values, _unit(_unit(truth)[:8]), atol=TOLERANCE)


@needs_ollama
async def test_ollama_truncation_none_refuses_an_over_long_input_and_end_cuts_it(ollama_model):
    text = " the" * 400  # far past the 256-token context
    with pytest.raises(errors.ProviderRejectedError):
        await ollama_model.aembed(_texts(text, truncation=embedding_pb2.EMBED_TRUNCATION_NONE))
    out = await ollama_model.aembed(_texts(text, truncation=embedding_pb2.EMBED_TRUNCATION_END))
    assert len(out.embeddings[0].values) == 64 and 0 < out.usage.input_token_count <= 256


# ---- vLLM -----------------------------------------------------------------------------------------------------------

VLLM_PYTHON = os.environ.get("MODELIR_VLLM")
VLLM_CONTEXT = 512  # the generation suite's: the same model directory, so torch.compile's cache is shared
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON, reason="set MODELIR_VLLM (make test-engines sets it)")
waits_for_vllm = pytest.mark.timeout(launch.VLLM_STARTUP_SECONDS + 120)  # the first test waits for the start


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """vLLM with a pooling runner: the generative tiny model converted to an embedding model, which pools the last
    token's normed hidden state (`as_embedding_model`) and scales it to unit length unless `use_activation` is
    false. One more server start (40-80 s warm)."""
    if url := os.environ.get("MODELIR_VLLM_EMBED_URL"):  # a pooling server already serving the model, for iterating
        yield url
        return
    assert VLLM_PYTHON is not None
    folder = tmp_path_factory.mktemp("vllm-embed")
    with launch.vllm_server(VLLM_PYTHON, folder, VLLM_CONTEXT, "--runner", "pooling", "--convert", "embed") as url:
        yield url


@pytest.fixture
async def vllm_model(vllm):
    executor = Executor(vllm)
    yield Model(VLLM(provider_model="tiny"), name="tiny", executor=executor)
    await executor.aclose()


@needs_vllm
@waits_for_vllm
async def test_vllm_pools_the_last_token_unscaled_and_scaled(vllm, vllm_model):
    inputs = ([1, 353, 72, 101, 108], [1, 72, 101])
    unscaled = await vllm_model.aembed(_ids(*inputs, normalization=NONE))
    scaled = await vllm_model.aembed(_ids(*inputs, normalization=L2))
    for ids, plain, unit in zip(inputs, unscaled.embeddings, scaled.embeddings, strict=True):
        truth = numpy_truth.hidden_states(ids)[-1]
        assert np.allclose(plain.values, truth, atol=TOLERANCE)
        assert np.allclose(unit.values, _unit(truth), atol=TOLERANCE)
    assert unscaled.usage.input_token_count == sum(map(len, inputs))
    assert not unscaled.warnings and not scaled.warnings  # every member of vLLM's answer accounted for
    async with httpx.AsyncClient() as client:
        answer = await client.post(vllm + "/v1/embeddings", json={"model": "tiny", "input": [list(inputs[0])]})
    assert list(scaled.embeddings[0].values) == _float32(answer.json()["data"][0]["embedding"])


@needs_vllm
@waits_for_vllm
async def test_vllm_truncation_end_keeps_the_start_and_none_refuses(vllm_model):
    long = [1] + [72] * 600  # past the 512-token context
    with pytest.raises(errors.ProviderRejectedError):
        await vllm_model.aembed(_ids(long, truncation=embedding_pb2.EMBED_TRUNCATION_NONE))
    out = await vllm_model.aembed(_ids(long, truncation=embedding_pb2.EMBED_TRUNCATION_END, normalization=NONE))
    assert out.usage.input_token_count == VLLM_CONTEXT
    assert np.allclose(out.embeddings[0].values, numpy_truth.hidden_states(long[:VLLM_CONTEXT])[-1], atol=TOLERANCE)
