"""The engine transports' tokenizer facts (`lower_tokenizer_info` / `lift_tokenizer_info`, for `ModelInfo.tokenizer`)
and the sampled-token attribution rules they share, beyond what the conformance fixtures prove."""

from __future__ import annotations

import json

import orjson
import pytest
from modelir import errors
from modelir.transports import _engine_output
from modelir.transports.base import HttpResponse
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.v1 import content_pb2, request_pb2, response_pb2

from tests.recordings import wire_dir


def _ok(body) -> HttpResponse:
    return HttpResponse(200, {"content-type": "application/json"}, orjson.dumps(body))


def test_llamacpp_vocabulary_size_from_the_recorded_models_answer():
    path = wire_dir("llama_cpp") / "v1_models.response.json"
    if not path.exists():
        pytest.skip("the llama.cpp recordings are not here")
    transport = LlamaCpp()
    (native,) = transport.lower_tokenizer_info("tiny")
    assert (native.method, native.path) == ("GET", "/v1/models")
    info = transport.lift_tokenizer_info([HttpResponse(200, {}, path.read_bytes())])
    assert info.vocabulary_size == json.loads(path.read_text())["data"][0]["meta"]["n_vocab"] == 357
    assert not info.HasField("bos_token_id") and not info.eos_token_ids  # /props names them only as text


@pytest.mark.parametrize("body", [{}, {"data": []}, {"data": [{"meta": {"n_vocab": "357"}}]}, []])
def test_llamacpp_a_models_answer_without_a_vocabulary_size_is_malformed(body):
    with pytest.raises(errors.MalformedResponseError, match="n_vocab"):
        LlamaCpp().lift_tokenizer_info([_ok(body)])


def test_ollama_tokenizer_facts_from_show():
    transport = Ollama(provider_model="llama3.1")
    (native,) = transport.lower_tokenizer_info("l")
    assert (native.method, native.path, orjson.loads(native.body)) == ("POST", "/api/show", {"model": "llama3.1"})
    show = {  # the shape of Ollama's API reference example for /api/show
        "modelfile": "...",
        "details": {"format": "gguf", "family": "llama"},
        "model_info": {
            "general.architecture": "llama",
            "llama.vocab_size": 128256,
            "tokenizer.ggml.bos_token_id": 128000,
            "tokenizer.ggml.eos_token_id": 128009,
            "tokenizer.ggml.eos_token_ids": [128001, 128009],
            "tokenizer.ggml.tokens": [],
        },
    }
    info = transport.lift_tokenizer_info([_ok(show)])
    assert info.vocabulary_size == 128256 and info.bos_token_id == 128000
    assert list(info.eos_token_ids) == [128009, 128001]


def test_ollama_absent_facts_stay_unset_and_a_missing_model_info_is_malformed():
    info = Ollama().lift_tokenizer_info([_ok({"model_info": {"general.architecture": "bert"}})])
    assert info.vocabulary_size == 0 and not info.HasField("bos_token_id") and not info.eos_token_ids
    with pytest.raises(errors.MalformedResponseError, match="model_info"):
        Ollama().lift_tokenizer_info([_ok({"details": {}})])


def _choice(*kinds: str) -> response_pb2.Choice:
    choice = response_pb2.Choice()
    for kind in kinds:
        part = choice.message.parts.add()
        if kind == "text":
            part.text = "x"
        else:
            part.reasoning.text = "r"
    choice.message.role = content_pb2.ROLE_ASSISTANT
    return choice


def test_attribution_one_part_several_parts_and_a_trimmed_tail():
    one = _choice("text")
    _engine_output.fill(one, [5, 6, 2], trimmed=1)
    assert list(one.sampled_tokens.token_ids) == [5, 6, 2] and list(one.sampled_tokens.part_indexes) == [0, 0, -1]
    several = _choice("reasoning", "text")
    _engine_output.fill(several, [5, 6], trimmed=0)
    assert list(several.sampled_tokens.token_ids) == [5, 6] and not several.sampled_tokens.part_indexes
    only_eos = _choice("text")  # nothing attributed: part indexes stay empty, as the stream accumulator leaves them
    _engine_output.fill(only_eos, [2], trimmed=1)
    assert list(only_eos.sampled_tokens.token_ids) == [2] and not only_eos.sampled_tokens.part_indexes
    assert _engine_output.trailing_stop([5, 2], 2) == 1
    assert _engine_output.trailing_stop([5, 2], "2") == 0 and _engine_output.trailing_stop([], 2) == 0
    assert _engine_output.trailing_stop([5, 1], True) == 0  # a JSON true is not a token id


def test_constrained_label_is_the_label_or_nothing():
    request = request_pb2.Request(model="m", prompt="x")
    request.constraint.choice.labels.extend(["yes", "no"])
    assert _engine_output.constrained_label(request, "yes") == "yes"
    assert _engine_output.constrained_label(request, "yes!") == ""
    assert _engine_output.constrained_label(request_pb2.Request(model="m", prompt="x"), "yes") == ""


def test_llamacpp_a_token_id_out_of_range_is_a_request_error():
    # The body a real llama-server sent for `/detokenize` of [99999] on a 356-token vocabulary.
    body = {
        "error": {
            "code": 500,
            "message": "vector::_M_range_check: __n (which is 99999) >= this->size() (which is 356)",
            "type": "server_error",
        }
    }
    exc = LlamaCpp().error(HttpResponse(500, {"content-type": "application/json"}, orjson.dumps(body)))
    assert isinstance(exc, errors.ProviderRejectedError) and not exc.retryable
    assert "outside the model's vocabulary" in exc.message and exc.http_status == 500
    other = LlamaCpp().error(HttpResponse(500, {}, b'{"error":{"message":"boom"}}'))
    assert isinstance(other, errors.ProviderUnavailableError)
