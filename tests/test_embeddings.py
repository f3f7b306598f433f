"""Embeddings (IR 1.1): `Model.aembed` through the executor, the checks before any call (`pipeline.embedding`), and
what the wires share (`transports.embedding`). The wires themselves are proven by the golden fixtures
(`conformance/fixtures/*/embed_*.json`, `reject_embed_*.json`) and live by `tests/engines/test_embeddings_live.py`."""

from __future__ import annotations

import base64
import struct

import httpx
import pytest
from modelir import errors
from modelir.http.executor import Executor
from modelir.model import Model
from modelir.pipeline import embedding as checks
from modelir.registry import build_transport
from modelir.transports import embedding
from modelir.v1 import embedding_pb2, request_pb2


def _b64(*values: float) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def _request(*texts: str, **fields) -> embedding_pb2.EmbedRequest:
    return embedding_pb2.EmbedRequest(inputs=[embedding_pb2.EmbedInput(text=t) for t in texts], **fields)


def _model(transport: str, answer, seen: list[httpx.Request], **options) -> Model:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request) if callable(answer) else httpx.Response(200, json=answer)

    executor = Executor("http://up.invalid/v1", transport=httpx.MockTransport(handler))
    return Model(build_transport(transport, {"provider_model": "e", **options}), name="emb", executor=executor)


OPENAI_ANSWER = {
    "object": "list",
    "data": [
        {"object": "embedding", "index": 1, "embedding": _b64(0.0, 1.0)},
        {"object": "embedding", "index": 0, "embedding": _b64(0.5, -0.25)},
    ],
    "model": "text-embedding-3-small",
    "usage": {"prompt_tokens": 4, "total_tokens": 4},
}


async def test_an_embed_call_goes_to_the_embedding_endpoint_and_comes_back_in_input_order():
    seen: list[httpx.Request] = []
    model = _model("openai_chat", OPENAI_ANSWER, seen)
    out = await model.aembed(_request("a", "b", include_raw=True))
    (sent,) = seen
    assert (sent.method, sent.url.path) == ("POST", "/v1/embeddings")
    assert sent.read() == b'{"model":"e","input":["a","b"],"encoding_format":"base64"}'
    assert [list(e.values) for e in out.embeddings] == [[0.5, -0.25], [0.0, 1.0]]
    assert [e.index for e in out.embeddings] == [0, 1]
    assert out.usage.input_token_count == 4 and out.model == "text-embedding-3-small"
    assert out.raw.transport == "openai_chat" and out.raw.http_status == 200 and b"prompt_tokens" in out.raw.body
    assert not out.warnings


async def test_a_model_whose_transport_claims_no_embeddings_refuses_before_any_call():
    seen: list[httpx.Request] = []
    model = _model("anthropic_messages", {}, seen)
    with pytest.raises(errors.UnsupportedCapabilityError) as caught:
        await model.aembed(_request("a"))
    assert errors.capability_name(caught.value.missing[0]) == "EMBEDDINGS" and seen == []


@pytest.mark.parametrize(
    ("transport", "fields", "field"),
    [
        ("ollama", {"normalization": embedding.NO_NORMALIZATION}, "normalization"),
        ("openai_chat", {"truncation": embedding.END_TRUNCATION}, "truncation"),
        ("llamacpp", {"dimension_count": 8}, "dimension_count"),
        ("google_genai", {"truncation": embedding.NONE_TRUNCATION}, "truncation"),
    ],
)
async def test_a_field_the_wire_cannot_honour_is_refused_by_name_before_any_call(transport, fields, field):
    seen: list[httpx.Request] = []
    with pytest.raises(errors.InvalidRequestError) as caught:
        await _model(transport, {}, seen).aembed(_request("a", **fields))
    assert [v.field for v in caught.value.violations] == [field] and seen == []


async def test_a_model_named_in_the_request_must_be_this_one():
    with pytest.raises(errors.InvalidRequestError) as caught:
        await _model("openai_chat", OPENAI_ANSWER, []).aembed(_request("a", model="other"))
    assert [v.field for v in caught.value.violations] == ["model"]


def test_unknown_enum_values_are_refused_as_the_closed_enums_they_are():
    request = _request("a")
    request.truncation = 7  # a newer release's value: running it under another rule could embed other text
    request.normalization = 9
    fields = [f for f, _ in checks.field_problems(request)]
    assert fields == ["truncation", "normalization"]


async def test_an_unread_member_of_the_answer_is_named_in_a_warning_with_its_json():
    answer = {**OPENAI_ANSWER, "x_cost": {"usd": 0.001}}
    out = await _model("openai_chat", answer, []).aembed(_request("a", "b"))
    (warning,) = out.warnings
    assert warning.code == "unread_native_fields" and 'x_cost = {"usd":0.001}' in warning.message


@pytest.mark.parametrize(
    "answer",
    [
        {**OPENAI_ANSWER, "data": OPENAI_ANSWER["data"][:1]},  # one vector for two inputs
        {**OPENAI_ANSWER, "data": [OPENAI_ANSWER["data"][0]] * 2},  # the same index twice
        {**OPENAI_ANSWER, "data": [{"index": 0, "embedding": "AAA="}, OPENAI_ANSWER["data"][0]]},  # 2 bytes
        {**OPENAI_ANSWER, "data": [{"index": 0, "embedding": {"x": 1}}, OPENAI_ANSWER["data"][0]]},
        {"choices": []},  # another endpoint's answer
    ],
)
async def test_an_answer_of_the_wrong_shape_is_a_typed_error(answer):
    with pytest.raises(errors.MalformedResponseError):
        await _model("openai_chat", answer, []).aembed(_request("a", "b"))


async def test_a_provider_error_is_typed_by_the_error_table():
    def too_long(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "too long", "type": "invalid_request_error"}})

    with pytest.raises(errors.ProviderRejectedError):
        await _model("openai_chat", too_long, []).aembed(_request("a"))


async def test_gemini_vectors_are_scaled_by_modelir_when_l2_is_asked_for_and_it_says_so():
    seen: list[httpx.Request] = []
    answer = {"embeddings": [{"values": [3, 4]}, {"values": [0, 0]}]}
    out = await _model("google_genai", answer, seen).aembed(_request("a", "b", normalization=embedding.L2))
    assert seen[0].url.path == "/v1/v1beta/models/e:batchEmbedContents"
    assert [list(e.values) for e in out.embeddings] == [pytest.approx([0.6, 0.8]), [0.0, 0.0]]  # zero stays zero
    assert [w.code for w in out.warnings] == [embedding.NORMALIZED_BY_MODELIR]


def test_base64_vectors_are_little_endian_float32_and_a_partial_value_is_refused():
    tenth = struct.unpack("<f", struct.pack("<f", 0.1))[0]  # 0.1 as float32 sends it
    assert list(embedding.base64_floats(_b64(1.5, -2.0, 0.1))) == [1.5, -2.0, tenth]
    with pytest.raises(ValueError, match="whole number"):
        embedding.base64_floats(base64.b64encode(b"\x00\x00\x80\x3f\x00").decode())


def test_unit_length_is_computed_in_double_precision():
    assert embedding.unit_length([3.0, 4.0]) == [0.6, 0.8]
    assert embedding.unit_length([0.0, 0.0]) == [0.0, 0.0]


def test_empty_inputs_and_bad_options_are_named_whatever_the_model():
    request = embedding_pb2.EmbedRequest(
        inputs=[embedding_pb2.EmbedInput(text=""), embedding_pb2.EmbedInput(token_ids=request_pb2.TokenIds(ids=[-1]))],
        provider_options=[{"transport": "ollama", "options_json": "[1]"}],
    )
    fields = [f for f, _ in checks.field_problems(request)]
    assert fields == ["inputs[0].text", "inputs[1].token_ids", "provider_options[0].options_json"]
    assert [f for f, _ in checks.field_problems(embedding_pb2.EmbedRequest())] == ["inputs"]


# ---- the reference model ---------------------------------------------------------------------------------------


async def test_the_reference_model_sums_its_tokens_fixed_vectors():
    from modelir import ReferenceModel
    from modelir.transports.reference import embedding as reference
    from modelir.transports.reference.vocabulary import BOS

    model = Model(ReferenceModel(), name="reference")
    ids = embedding_pb2.EmbedInput(token_ids=request_pb2.TokenIds(ids=[72, 105]))
    out = await model.aembed(embedding_pb2.EmbedRequest(inputs=[embedding_pb2.EmbedInput(text="Hi"), ids]))
    vectors = reference.token_vectors()
    text, tokens = out.embeddings
    assert list(text.values) == (vectors[BOS] + vectors[72] + vectors[105]).tolist()  # BOS, then the UTF-8 bytes
    assert list(tokens.values) == (vectors[72] + vectors[105]).tolist()
    assert (text.input_token_count, tokens.input_token_count, out.usage.input_token_count) == (3, 2, 5)
    assert all(v * 16 == int(v * 16) for v in text.values)  # multiples of 1/16: exact in every language


async def test_the_reference_model_scales_shortens_and_truncates_as_asked():
    from modelir import ReferenceModel
    from modelir.transports.reference.embedding import DIMENSIONS, MAX_INPUT_TOKENS

    model = Model(ReferenceModel(), name="reference")
    plain = (await model.aembed(_request("abc"))).embeddings[0]
    scaled = (await model.aembed(_request("abc", normalization=embedding.L2, dimension_count=4))).embeddings[0]
    assert len(plain.values) == DIMENSIONS and len(scaled.values) == 4
    assert list(scaled.values) == pytest.approx(embedding.unit_length(list(plain.values)[:4]))
    long = "x" * MAX_INPUT_TOKENS
    with pytest.raises(errors.InvalidRequestError) as caught:
        await model.aembed(_request("ok", long))
    assert [v.field for v in caught.value.violations] == ["inputs[1]"]
    cut = (await model.aembed(_request(long, truncation=embedding.END_TRUNCATION))).embeddings[0]
    assert cut.truncated and cut.input_token_count == MAX_INPUT_TOKENS
    with pytest.raises(errors.InvalidRequestError) as caught:
        await model.aembed(_request("a", dimension_count=DIMENSIONS + 1))
    assert [v.field for v in caught.value.violations] == ["dimension_count"]
