"""Detokenize refuses a token id outside the model's vocabulary (INVALID_REQUEST naming the id and the size) before
any call, against the size learned once per model: vLLM's from its own refusal (its `/detokenize` answers such an
id with an empty text), llama-server's from `/v1/models`, the reference model's from itself; where the size cannot
be learned, the text is answered and the log says the ids went unchecked. The engine answers are the ones vLLM 0.32
and llama-server gave live (`engines/test_vllm_live.py`, `engines/test_llamacpp_live.py`)."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web
from modelir import Model, connect, errors
from modelir.calls.tokenizer import out_of_vocabulary
from modelir.transports.base import HttpResponse
from modelir.transports.reference import ReferenceModel
from modelir.transports.vllm import vocabulary
from modelir.v1 import capabilities_pb2

# vLLM 0.32's answer to `vocabulary.lower` on the tiny model (356 tokens), byte for byte.
VLLM_REFUSAL = (
    b'{"error":{"message":"token_id(s) [2147483647] in logit_bias contain out-of-vocab token ids. Vocabulary size: '
    b'356 (parameter=logit_bias, value=[2147483647])","type":"BadRequestError","param":"logit_bias","code":400}}'
)
VOCABULARY = [f"<0x{b:02X}>" for b in range(256)] + [f"piece{i}" for i in range(100)]  # 356 ids


async def _engine(probe: tuple[int, bytes]):
    """A vLLM-like server: the probe's answer as given, `/detokenize` as vLLM's (an empty text for an unknown id)."""
    hits: list[str] = []

    async def completions(request: web.Request) -> web.Response:
        hits.append("probe")
        return web.Response(status=probe[0], body=probe[1], content_type="application/json")

    async def detokenize(request: web.Request) -> web.Response:
        ids = (await request.json())["tokens"]
        hits.append(f"detokenize {ids}")
        return web.json_response({"prompt": "".join(VOCABULARY[i] if i < len(VOCABULARY) else "" for i in ids)})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/detokenize", detokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", hits


async def test_vllm_refuses_an_id_outside_the_vocabulary_it_learned_once():
    runner, base, hits = await _engine((400, VLLM_REFUSAL))
    model = connect("vllm", "tiny", base_url=base, max_attempts=1)
    try:
        with pytest.raises(errors.InvalidRequestError) as refused:
            await model.adetokenize([10, 99999])
        assert [(v.field, v.description) for v in refused.value.violations] == [
            ("token_ids[1]", "Token id 99999 is outside the model's vocabulary of 356 tokens (ids 0 to 355).")
        ]
        assert await model.adetokenize([300, 355]) == "piece44piece99"
        with pytest.raises(errors.InvalidRequestError, match="Token id 356 "):
            await model.adetokenize([356])
        assert hits == ["probe", "detokenize [300, 355]"]  # asked once; no refused id ever reaches the engine
        assert (await model.atokenizer_info()).vocabulary_size == 356
    finally:
        await model.aclose()
        await runner.cleanup()


@pytest.mark.parametrize(
    "probe",
    [
        (200, b'{"choices":[{"index":0,"text":"x","finish_reason":"length"}]}'),  # a vLLM that does not validate
        (400, b'{"error":{"message":"logit_bias is not supported","code":400}}'),  # another wording
    ],
)
async def test_vllm_without_a_size_answers_and_logs_that_the_ids_went_unchecked(probe, caplog):
    runner, base, hits = await _engine(probe)
    model = connect("vllm", "tiny", base_url=base, max_attempts=1)
    try:
        with caplog.at_level(logging.WARNING, logger="modelir.model"):
            assert await model.adetokenize([99999]) == ""
            assert await model.adetokenize([300]) == "piece44"
        warned = [r.getMessage() for r in caplog.records if "cannot be refused" in r.getMessage()]
        assert len(warned) == 1 and "vocabulary size is unknown" in warned[0]  # once per model
        assert hits == ["probe", "detokenize [99999]", "detokenize [300]"]  # the unknown size is kept too
    finally:
        await model.aclose()
        await runner.cleanup()


async def test_vllm_probe_that_fails_is_asked_again_later(caplog):
    runner, base, hits = await _engine((503, b'{"error":{"message":"loading","code":503}}'))
    model = connect("vllm", "tiny", base_url=base, max_attempts=1)
    try:
        assert await model.adetokenize([300]) == "piece44"
        assert await model.adetokenize([301]) == "piece45"
        assert hits == ["probe", "detokenize [300]", "probe", "detokenize [301]"]
        assert "tokenizer facts are unavailable" in caplog.text
    finally:
        await model.aclose()
        await runner.cleanup()


async def test_llamacpp_refuses_before_its_500():
    hits: list[str] = []

    async def models(request: web.Request) -> web.Response:
        hits.append("models")
        return web.json_response({"data": [{"id": "tiny", "meta": {"n_vocab": 356}}]})

    async def detokenize(request: web.Request) -> web.Response:
        hits.append("detokenize")
        return web.json_response({"content": "x"})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/detokenize", detokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    model = connect("llamacpp", "tiny", base_url=f"http://127.0.0.1:{port}", max_attempts=1)
    try:
        with pytest.raises(errors.InvalidRequestError, match=r"token_ids\[0\]: Token id 356 .* of 356 tokens"):
            await model.adetokenize([356])
        assert await model.adetokenize([355]) == "x"
        assert hits == ["models", "detokenize"]
    finally:
        await model.aclose()
        await runner.cleanup()


async def test_the_reference_model_refuses_ids_beyond_bos_and_eos():
    model = Model(ReferenceModel(), name="reference")
    assert await model.adetokenize([256, 104, 0xC3, 0xA9, 257]) == "hé"
    with pytest.raises(errors.InvalidRequestError) as refused:
        await model.adetokenize([104, 258, -1])
    assert [v.field for v in refused.value.violations] == ["token_ids[1]", "token_ids[2]"]
    assert "vocabulary of 258 tokens" in refused.value.violations[0].description


def test_out_of_vocabulary_without_a_size_refuses_only_negative_ids():
    assert out_of_vocabulary([5, 10**9], None) is None
    assert out_of_vocabulary([5, 10**9], capabilities_pb2.TokenizerInfo()) is None
    assert out_of_vocabulary([-1], None).violations[0].field == "token_ids[0]"
    assert out_of_vocabulary([9], capabilities_pb2.TokenizerInfo(vocabulary_size=10)) is None


def test_vllm_vocabulary_lift_reads_the_size_from_the_refusal_only():
    assert vocabulary.lift([HttpResponse(400, {}, VLLM_REFUSAL)]).vocabulary_size == 356
    assert not vocabulary.lift([HttpResponse(200, {}, b'{"choices":[]}')]).vocabulary_size
    assert not vocabulary.lift([HttpResponse(400, {}, b'{"error":{"message":"Vocabulary size: 0"}}')]).vocabulary_size
    assert not vocabulary.lift([HttpResponse(400, {}, b'{"error":"plain"}')]).vocabulary_size
    (native,) = vocabulary.lower("tiny")
    assert native.path == "/v1/completions" and b'"logit_bias":{"2147483647":0}' in native.body
