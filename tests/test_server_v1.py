"""The v1 service facts over gRPC: `ListModels` carries tokenizer facts, `Tokenize` takes a conversation, and
`RemoteModel` offers every method of `Model`."""

from __future__ import annotations

import inspect

import grpc
import pytest
from modelir import Model, ReferenceModel, RemoteModel
from modelir.server import build_server
from modelir.transports.reference.vocabulary import BOS, EOS, VOCAB
from modelir.v1 import content_pb2, service_pb2, service_pb2_grpc


@pytest.fixture
async def served():
    server, port = await build_server({"reference": Model(ReferenceModel(), name="reference")}, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield service_pb2_grpc.ModelServiceStub(channel), f"127.0.0.1:{port}"
    await channel.close()
    await server.stop(None)


async def test_list_models_carries_the_tokenizer_facts(served):
    stub, _ = served
    (info,) = (await stub.ListModels(service_pb2.ListModelsRequest())).models
    assert info.HasField("tokenizer")
    assert (info.tokenizer.vocabulary_size, info.tokenizer.bos_token_id) == (VOCAB, BOS)
    assert list(info.tokenizer.eos_token_ids) == [EOS]


async def test_tokenize_a_conversation_over_grpc(served):
    stub, target = served
    request = service_pb2.TokenizeRequest(model="reference", add_generation_prompt=True)
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="Hi")
    answer = await stub.Tokenize(request)
    assert answer.token_bytes == b"<|user|>\nHi\n<|assistant|>\n"
    remote = RemoteModel(target, "reference")
    try:
        assert await remote.atokenize_request(request) == answer
    finally:
        await remote.aclose()


def test_remote_model_offers_every_public_method_of_model():
    def public(cls: type) -> set[str]:
        return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}

    missing = public(Model) - public(RemoteModel)
    assert not missing, f"RemoteModel lacks {sorted(missing)}"
