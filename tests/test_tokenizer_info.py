"""`ListModels` reports each model's tokenizer facts, asked from the engine once, and survives an engine that
cannot answer."""

from __future__ import annotations

import grpc
from aiohttp import web
from modelir import Model, connect
from modelir.server import build_server
from modelir.transports.reference import ReferenceModel
from modelir.v1 import service_pb2, service_pb2_grpc


async def _engine(answer: dict | None):
    hits = []

    async def models(request):
        hits.append(request.path)
        if answer is None:
            return web.json_response({"error": {"message": "down"}}, status=503)
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", hits


async def test_list_models_carries_the_engine_vocabulary_once_and_the_reference_facts():
    runner, base, hits = await _engine({"data": [{"id": "tiny", "meta": {"n_vocab": 32000}}]})
    engine = connect("llamacpp", "tiny", base_url=base, name="tiny")
    server, port = await build_server(
        {"tiny": engine, "reference": Model(ReferenceModel(), name="reference")}, "127.0.0.1:0"
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.ModelServiceStub(channel)
            for _ in range(2):
                listed = {m.name: m for m in (await stub.ListModels(service_pb2.ListModelsRequest())).models}
        assert listed["tiny"].tokenizer.vocabulary_size == 32000
        assert listed["reference"].tokenizer.vocabulary_size > 0
        assert hits == ["/v1/models"]  # asked once, then kept
    finally:
        await server.stop(None)
        await engine.aclose()
        await runner.cleanup()


async def test_an_engine_that_cannot_answer_leaves_the_facts_unset(caplog):
    runner, base, _ = await _engine(None)
    engine = connect("llamacpp", "tiny", base_url=base, max_attempts=1)
    try:
        assert await engine.atokenizer_info() is None
        assert "tokenizer facts are unavailable" in caplog.text
    finally:
        await engine.aclose()
        await runner.cleanup()
