"""Stream coalescing: waiting deltas of one part merge into one event, a lone delta is never held back, the fold
is unchanged (locally and through the server), failures and early closes reach the source, and an abandoned
stream's RPC still ends cleanly."""

from __future__ import annotations

import asyncio
import gc
import io

import grpc
import orjson
import pytest
from google.protobuf import json_format
from modelir import Model, ReferenceModel, accumulate, build_request, errors
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.streams import coalesce
from modelir.streams.coalesce import coalesced, merge_waiting
from modelir.streams.fold import events_from_response
from modelir.telemetry import access_log
from modelir.transports.base import LocalTransport
from modelir.v1 import content_pb2, request_pb2, response_pb2, service_pb2, service_pb2_grpc, stream_pb2

E = stream_pb2.StreamEvent
D = stream_pb2.PartDelta


def _delta(**fields) -> stream_pb2.StreamEvent:
    return E(delta=D(**fields))


def _requests() -> list[request_pb2.Request]:
    reasoning = json_format.ParseDict(
        {
            "model": "reference",
            "conversation": {"messages": [{"role": "ROLE_USER", "parts": [{"text": "Why is the sky blue?"}]}]},
            "sampling": {"seed": "1", "maxOutputTokens": 90, "choiceCount": 2},
            "reasoningControls": {"effort": "REASONING_EFFORT_MINIMAL"},
        },
        request_pb2.Request(),
    )
    return [
        build_request("reference", messages=[("user", "Tell me a story.")], max_output_tokens=120, top_logprobs=3),
        build_request("reference", prompt="héllo wörld", max_output_tokens=70, top_logprobs=2, seed=3),
        reasoning,
    ]


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 16])
async def test_merging_every_waiting_event_keeps_the_fold(chunk_size):
    model = Model(ReferenceModel(), name="reference")
    for request in _requests():
        response = await model.arun(request)
        events = list(events_from_response(response, chunk_size=chunk_size))
        merged = merge_waiting(events)
        assert accumulate(merged) == accumulate(events) == response
        deltas = [e for e in events if e.WhichOneof("event") == "delta"]
        merged_deltas = [e for e in merged if e.WhichOneof("event") == "delta"]
        # One event per part at most: every part's deltas were waiting together.
        parts = {(e.delta.choice_index, e.delta.part_index) for e in deltas if e.delta.WhichOneof("content")}
        assert len(merged_deltas) <= len(parts) + 2 * len(response.choices)
        if len(deltas) > len(parts) + 2 * len(response.choices):
            assert len(merged_deltas) < len(deltas)


@pytest.mark.parametrize("chunk_size", [1, 16])
async def test_a_messages_phase_and_a_choices_native_facts_survive_unfold_merge_and_fold(chunk_size):
    """IR 1.1's `PartDelta.phase` and `ChoiceFinish.native_json`: a response that has them unfolds into events that
    carry them, the coalescer keeps the last phase of a run, and the fold gives them back."""
    response = await Model(ReferenceModel(), name="reference").arun(_requests()[0])
    response.choices[0].message.phase = content_pb2.MESSAGE_PHASE_COMMENTARY
    response.choices[0].native_json = '{"safetyRatings": []}'
    events = list(events_from_response(response, chunk_size=chunk_size))
    assert accumulate(merge_waiting(events)) == accumulate(events) == response
    bare = response_pb2.Response()
    bare.choices.add().message.phase = content_pb2.MESSAGE_PHASE_FINAL_ANSWER  # no parts: a delta of its own
    bare.choices[0].message.role = content_pb2.ROLE_ASSISTANT
    assert accumulate(events_from_response(bare)) == bare
    run = [_delta(text="a", phase=content_pb2.MESSAGE_PHASE_COMMENTARY), _delta(text="b")]
    run.append(_delta(text="c", phase=content_pb2.MESSAGE_PHASE_FINAL_ANSWER))
    (merged,) = merge_waiting(run)
    assert (merged.delta.text, merged.delta.phase) == ("abc", content_pb2.MESSAGE_PHASE_FINAL_ANSWER)
    assert accumulate([merged]).choices[0].message.phase == content_pb2.MESSAGE_PHASE_FINAL_ANSWER


def test_logprob_columns_are_appended_with_byte_offsets_rebased():
    response = response_pb2.Response()
    choice = response.choices.add()
    choice.message.role = content_pb2.ROLE_ASSISTANT
    choice.message.parts.add(text="héé!")
    lp = choice.logprobs
    lp.token_ids.extend([1, 2, 3])
    lp.token_logprobs.extend([-0.5, -1.0, -1.5])
    lp.tokens.extend(["h", "éé", "!"])
    lp.token_bytes = "héé!".encode()
    lp.token_byte_offsets.extend([0, 1, 5])
    lp.top_counts.extend([1, 2, 0])
    lp.top_token_ids.extend([7, 8, 9])
    lp.top_logprobs.extend([-0.1, -0.2, -0.3])
    lp.top_tokens.extend(["x", "é", "y"])
    lp.top_token_bytes = "xéy".encode()
    lp.top_token_byte_offsets.extend([0, 1, 3])
    events = list(events_from_response(response, chunk_size=1))
    (merged,) = [e for e in merge_waiting(events) if e.WhichOneof("event") == "delta"]
    assert merged.delta.text == "héé!"
    assert list(merged.delta.logprobs.token_byte_offsets) == [0, 1, 5]
    assert list(merged.delta.logprobs.top_token_byte_offsets) == [0, 1, 3]
    assert merged.delta.logprobs.token_bytes == "héé!".encode()
    assert accumulate(merge_waiting(events)) == response


def test_what_is_never_merged():
    start, end = E(start=stream_pb2.StreamStart(id="r")), E(end=stream_pb2.StreamEnd())
    blob = _delta(part_index=2, blob=content_pb2.Blob(mime_type="image/png", data=b"x"))
    events = [
        start,
        _delta(text="a"),
        _delta(text="b"),
        _delta(part_index=1, text="c"),  # another part (a text part, then a tool call in the same slot)
        _delta(choice_index=1, part_index=0, text="d"),  # another choice
        _delta(part_index=1, tool_call=stream_pb2.ToolCallDelta(id="t", name="f", arguments_json='{"a"')),
        _delta(part_index=1, tool_call=stream_pb2.ToolCallDelta(arguments_json=":1}")),
        blob,
        blob,
        _delta(part_index=3, reasoning=stream_pb2.ReasoningDelta(summary_index=0, summary_text="s")),
        _delta(part_index=3, reasoning=stream_pb2.ReasoningDelta(summary_index=1, summary_text="t")),
        end,
    ]
    merged = merge_waiting(events)
    kinds = [(e.WhichOneof("event"), e.delta.WhichOneof("content")) for e in merged]
    assert kinds == [
        ("start", None),
        ("delta", "text"),  # "a" + "b"
        ("delta", "text"),  # another part
        ("delta", "text"),  # another choice
        ("delta", "tool_call"),  # another kind at that part index; its two deltas merged
        ("delta", "blob"),
        ("delta", "blob"),
        ("delta", "reasoning"),  # two summaries
        ("delta", "reasoning"),
        ("end", None),
    ]
    assert merged[1].delta.text == "ab"
    assert [e.delta.text for e in merged[2:4]] == ["c", "d"]
    (call,) = [e for e in merged if e.delta.WhichOneof("content") == "tool_call"]
    assert (call.delta.tool_call.id, call.delta.tool_call.name, call.delta.tool_call.arguments_json) == (
        "t",
        "f",
        '{"a":1}',
    )
    assert accumulate(merged) == accumulate(events)
    assert merged[0] is start and merged[-1] is end


def test_a_logprob_only_delta_joins_the_run_before_it_and_artifacts_keep_their_order():
    first = _delta(text="a", item_id="i1")
    first.delta.artifacts.add(data=b"1")
    second = _delta(text="b")
    second.delta.artifacts.add(data=b"2")
    only = _delta(logprobs={"token_logprobs": [-1.0], "tokens": ["b"]})
    events = [first, second, only]
    (merged,) = merge_waiting(events)
    assert merged.delta.text == "ab" and merged.delta.item_id == "i1"
    assert [a.data for a in merged.delta.artifacts] == [b"1", b"2"]
    assert list(merged.delta.logprobs.tokens) == ["b"]
    assert accumulate(events) == accumulate([merged])


async def test_a_lone_delta_is_passed_on_at_once():
    handed_on = asyncio.Event()

    async def source():
        yield _delta(text="first")
        await asyncio.wait_for(handed_on.wait(), 5)  # the next delta exists only once the first was passed on
        yield _delta(text="second")

    received = []
    async for event in coalesced(source()):
        received.append(event.delta.text)
        handed_on.set()
    assert received == ["first", "second"]


async def test_the_first_token_leaves_before_a_buffered_burst_is_read_to_its_end():
    # A fast upstream: the decoder yields a whole burst of events without suspending once.
    read = []

    async def source():
        yield E(start=stream_pb2.StreamStart())
        for piece in "abcdef":
            read.append(piece)
            yield _delta(text=piece)
        read.append("end")
        yield E(end=stream_pb2.StreamEnd())

    out = []
    async for event in coalesced(source()):
        out.append((event.WhichOneof("event"), event.delta.text, len(read)))
    assert out[0] == ("start", "", 0)  # the consumer was waiting: the start left before anything else was read
    assert out[1] == ("delta", "a", 1)  # the first token left alone, before the rest was read
    assert "".join(text for _, text, _ in out) == "abcdef" and out[-1][0] == "end"


async def test_the_first_delta_of_every_choice_leaves_alone_while_the_consumer_is_busy():
    async def source():
        yield E(start=stream_pb2.StreamStart())
        for choice in (0, 1):
            for piece in "abc":
                yield _delta(choice_index=choice, text=f"{choice}{piece}")

    out = []
    async for event in coalesced(source()):
        out.append(event.delta.text)
        for _ in range(5):  # a busy consumer (a gRPC write): what the source yields meanwhile waits
            await asyncio.sleep(0)
    assert out[:2] == ["", "0a"]
    assert "1a" in out  # the first delta of choice 1 was not merged with the deltas after it
    assert "".join(out) == "0a0b0c1a1b1c"


async def test_a_long_burst_is_read_in_shares_so_other_streams_are_not_kept_waiting(monkeypatch):
    # Only the shares are under test: with the idle-gap rule on, a loaded machine's pauses between two events read
    # as gaps, each one holding that stream's reader until its consumer comes, and the interleaving becomes timing.
    monkeypatch.setattr(coalesce, "_IDLE_GAP", 3600.0)
    read = []

    async def source(name):
        yield E(start=stream_pb2.StreamStart())
        for i in range(200):  # a whole stream already buffered: never suspends
            read.append((name, i))
            yield _delta(text="x")

    async def drain(name):
        return "".join([e.delta.text async for e in coalesced(source(name))])

    assert await asyncio.gather(drain("a"), drain("b")) == ["x" * 200, "x" * 200]
    assert read.index(("b", 100)) < read.index(("a", 199))  # the two bursts were read in turns, not one after the other


async def test_deltas_waiting_behind_a_slow_reader_leave_as_one_event():
    produced = asyncio.Event()

    async def source():
        yield _delta(text="a")
        await asyncio.sleep(0)  # the reader takes "a" alone
        for piece in "bcdef":
            yield _delta(text=piece)
        produced.set()
        await asyncio.sleep(0)
        yield E(end=stream_pb2.StreamEnd())

    out = []
    async for event in coalesced(source()):
        out.append(event)
        await produced.wait()  # a slow reader: everything else is waiting when it comes back
    assert [e.WhichOneof("event") for e in out] == ["delta", "delta", "end"]
    assert [e.delta.text for e in out[:2]] == ["a", "bcdef"]


async def test_a_failure_reaches_the_reader_after_the_events_before_it_and_closing_closes_the_source():
    async def failing():
        yield _delta(text="a")
        yield _delta(text="b")
        raise errors.TruncatedStreamError("cut")

    seen = []
    with pytest.raises(errors.TruncatedStreamError):
        async for event in coalesced(failing()):
            seen.append(event.delta.text)
    assert "".join(seen) == "ab"

    closed = asyncio.Event()

    async def endless():
        try:
            while True:
                yield _delta(text="x")
                await asyncio.sleep(0)
        finally:
            closed.set()

    stream = coalesced(endless())
    await stream.__anext__()
    await stream.aclose()
    assert closed.is_set()


async def test_under_backlog_the_server_sends_fewer_events_and_the_same_answer():
    model = Model(ReferenceModel(), name="reference")
    server, port = await build_server({"reference": model}, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.ModelServiceStub(channel)
            for request in _requests():
                direct = [e async for e in model.astream(request)]
                sent = [m.event async for m in stub.StreamGenerate(service_pb2.StreamGenerateRequest(request=request))]
                unary = (await stub.Generate(service_pb2.GenerateRequest(request=request))).response
                for response in (unary, folded := accumulate(sent)):
                    response.ClearField("timing")
                assert folded == unary
                assert len(sent) < len(direct)  # the reference model's deltas are all waiting at once
    finally:
        await server.stop(None)


class _Endless(LocalTransport):
    """An in-process model whose stream never ends: a large delta every millisecond, so that a caller that stops
    reading leaves the server blocked writing (gRPC flow control), where only asyncio's finaliser closes it."""

    name = "endless"
    version = "0"

    def manifest(self):
        manifest = ReferenceModel().manifest()
        manifest.transport = self.name
        return manifest

    async def run(self, request):
        raise AssertionError("only streamed")

    async def stream(self, request):
        yield E(start=stream_pb2.StreamStart(id="endless"))
        while True:
            yield _delta(text="x" * 100_000)
            await asyncio.sleep(0.001)

    async def tokenize(self, request):
        raise AssertionError("only streamed")


async def test_an_abandoned_stream_ends_its_rpc_in_the_finaliser_context():
    """A stream the client cancels is closed by asyncio's finaliser in a context of its own: the RPC still writes
    its access-log line (CANCELLED), without 'Token created in a different Context'."""
    lines = io.BytesIO()
    access_log.configure("json", lines)
    problems: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: problems.append(context.get("exception") or context["message"]))
    server, port = await build_server({"endless": Model(_Endless(), name="endless")}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "endless")
    try:
        request = build_request("endless", prompt="x")

        async def consume():
            async for event in remote.astream(request):
                if event.WhichOneof("event") == "delta":
                    await asyncio.sleep(30)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(20):
            gc.collect()
            await asyncio.sleep(0.05)
            access_log.access_log().flush()
            if b"CANCELLED" in lines.getvalue():
                break
    finally:
        await remote.aclose()
        await server.stop(None)
        loop.set_exception_handler(None)
        access_log.access_log().flush()
        access_log.configure()
    logged = [orjson.loads(line) for line in lines.getvalue().splitlines()]
    assert [line["status"] for line in logged if line["method"] == "StreamGenerate"] == ["CANCELLED"]
    assert not [p for p in problems if "different Context" in str(p)]


async def test_the_coalesced_stream_is_numbered_again_without_gaps():
    from modelir.streams.coalesce import coalesced

    async def source():
        for i in range(40):
            yield stream_pb2.StreamEvent(sequence_number=i, delta=stream_pb2.PartDelta(text="x"))
            if i % 10 == 9:
                await asyncio.sleep(0)

    got = [e async for e in coalesced(source())]
    assert len(got) < 40 and [e.sequence_number for e in got] == list(range(len(got)))
    assert "".join(e.delta.text for e in got) == "x" * 40


async def test_a_served_chat_stream_takes_the_batched_merging_path_and_folds_as_the_unary_answer():
    """The server reads a chat stream in batches with its plain chunks merged (`Model.astream_batches(merge=True)`):
    the folded stream is the unary answer, the in-process `astream` still gives one delta per chunk."""
    from modelir.http.executor import Executor
    from modelir.transports.openai.chat import OpenAIChat

    from tests.fake_openai import ANSWER, FakeOpenAI

    async with FakeOpenAI() as fake:
        model = Model(OpenAIChat(provider_model="gpt-x"), name="chat", executor=Executor(fake.base_url))
        request = build_request("chat", messages=[("user", "Hi")])
        direct = [e async for e in model.astream(request)]
        assert [e.delta.text for e in direct if e.WhichOneof("event") == "delta"] == ANSWER
        timing = direct[-1].end.timing  # the call's own clock, stamped on the end
        assert timing.attempt_count == 1 and timing.HasField("first_output_duration") and timing.HasField("end_time")
        assert (
            timing.first_output_duration.ToNanoseconds()
            <= timing.end_time.ToNanoseconds() - timing.start_time.ToNanoseconds()
        )
        batches = [b async for b in model.astream_batches(request, merge=True)]
        assert all(batches) and accumulate([e for b in batches for e in b]).choices == accumulate(direct).choices
        server, port = await build_server({"chat": model}, "127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = service_pb2_grpc.ModelServiceStub(channel)
                sent = [m.event async for m in stub.StreamGenerate(service_pb2.StreamGenerateRequest(request=request))]
                unary = (await stub.Generate(service_pb2.GenerateRequest(request=request))).response
        finally:
            await server.stop(None)
    folded = accumulate(sent)
    for response in (folded, unary):
        response.ClearField("timing")
        response.ClearField("id")
    assert folded.choices == unary.choices and folded.usage == unary.usage
    assert [e.sequence_number for e in sent] == list(range(len(sent)))


async def test_the_first_delta_is_lifted_and_handed_over_before_the_rest_of_its_read():
    """An upstream that writes its whole stream at once: one read holds every chunk. The first text still leaves
    alone, ahead of the lift of the rest (which then arrives merged)."""
    from aiohttp import web
    from modelir.http.executor import Executor
    from modelir.transports.openai.chat import OpenAIChat

    from tests.fake_openai import _chunk

    pieces = [f"t{i} " for i in range(50)]
    body = b"".join(
        [
            _chunk("m", {"role": "assistant", "content": ""}),
            *(_chunk("m", {"content": piece}) for piece in pieces),
            _chunk("m", {}, finish="stop"),
            b"data: [DONE]\n\n",
        ]
    )

    async def whole(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", whole)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]
        model = Model(OpenAIChat(provider_model="m"), name="m", executor=Executor(f"http://127.0.0.1:{port}/v1"))
        request = build_request("m", messages=[("user", "Hi")])
        batches = [b async for b in model.astream_batches(request, merge=True)]
        texts = [[e.delta.text for e in batch if e.WhichOneof("event") == "delta"] for batch in batches]
        first = next(i for i, t in enumerate(texts) if t)
        assert texts[first] == ["t0 "]  # alone
        assert "".join(t for batch in texts for t in batch) == "".join(pieces)
        assert sum(map(len, texts)) < len(pieces)  # the rest merged
    finally:
        await runner.cleanup()
