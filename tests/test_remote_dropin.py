"""`RemoteModel` is a drop-in for `connect()`: every public method and lifecycle method of a `Connection` exists on
it with a compatible signature, it is a sync and an async context manager, and `max_concurrency` caps its calls."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest
from modelir import Model, ReferenceModel, build_request
from modelir.connect import Connection
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.transports.base import LocalTransport
from modelir.writing import ArgumentError

LIFECYCLE = {"close", "aclose", "__enter__", "__exit__", "__aenter__", "__aexit__"}


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, callable)
        if (not name.startswith("_") or name in LIFECYCLE) and not inspect.isclass(member)
    }


def test_every_public_and_lifecycle_method_of_a_connection_is_on_remote_model():
    local, remote = _public_methods(Connection), _public_methods(RemoteModel)
    assert LIFECYCLE <= set(local)
    missing = sorted(set(local) - set(remote))
    assert not missing, f"RemoteModel lacks {missing}"
    for name, signature in local.items():
        theirs = remote[name].parameters
        for parameter in signature.parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                assert any(p.kind == parameter.kind for p in theirs.values()), f"{name}: no {parameter}"
                continue
            assert parameter.name in theirs, f"RemoteModel.{name} takes no {parameter.name!r}"
            assert theirs[parameter.name].kind == parameter.kind, f"{name}({parameter.name}): another kind"
            assert (theirs[parameter.name].default is inspect.Parameter.empty) == (
                parameter.default is inspect.Parameter.empty
            ), f"{name}({parameter.name}): required on one side only"
        extra_required = [
            p.name
            for p in theirs.values()
            if p.name not in signature.parameters
            and p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        assert not extra_required, f"RemoteModel.{name} also requires {extra_required}"
    assert "max_concurrency" in inspect.signature(RemoteModel).parameters


class Gate(LocalTransport):
    """The reference model, answering only when released; counts the calls in flight."""

    name = "gate"
    version = "0"

    def __init__(self) -> None:
        self.inner = ReferenceModel()
        self.in_flight = self.peak = 0

    def manifest(self):
        manifest = self.inner.manifest()
        manifest.transport = self.name
        return manifest

    async def run(self, request):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.05)
            return self.inner.generate(request)
        finally:
            self.in_flight -= 1

    async def stream(self, request):
        async for event in self.inner.stream(request):
            yield event

    async def tokenize(self, request):
        return await self.inner.tokenize(request)


@pytest.fixture
async def server():
    gate = Gate()
    served, port = await build_server({"gate": Model(gate, name="gate")}, "127.0.0.1:0")
    await served.start()
    yield f"127.0.0.1:{port}", gate
    await served.stop(None)


async def test_async_context_manager_and_max_concurrency(server):
    target, gate = server
    async with RemoteModel(target, "gate", max_concurrency=2) as model:
        replies = await asyncio.gather(*(model.agenerate("x", max_output_tokens=2) for _ in range(6)))
        assert len(replies) == 6
        channels = dict(model._stubs)
        assert channels
    assert not model._stubs  # the channel of this loop was closed on leaving
    assert gate.peak == 2


def test_sync_context_manager_closes_its_channel():
    loop = asyncio.new_event_loop()  # the server runs on a loop of its own: the sync calls block this thread
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        served, port = await build_server({"gate": Model(Gate(), name="gate")}, "127.0.0.1:0")
        await served.start()
        return served, port

    served, port = asyncio.run_coroutine_threadsafe(start(), loop).result()
    try:
        with RemoteModel(f"127.0.0.1:{port}", "gate") as model:
            assert model.chat("Hello", max_output_tokens=2).choices
            assert model._stubs
        assert not model._stubs
    finally:
        asyncio.run_coroutine_threadsafe(served.stop(None), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_max_concurrency_is_checked():
    with pytest.raises(ArgumentError, match="max_concurrency"):
        RemoteModel("127.0.0.1:1", "m", max_concurrency=0)


def test_remote_refuses_a_string_request():
    with pytest.raises(ArgumentError, match="run"):
        RemoteModel("127.0.0.1:1", "m").run("Hello")  # type: ignore[arg-type]
    assert build_request("m", messages="Hello").conversation.messages
