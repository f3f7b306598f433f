"""SDK behaviour that must hold wherever a request enters (#15): incremental sync streams, one answer to a request
that names another model, and the field checks that run before any I/O."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest
from modelir import (
    InvalidRequestError,
    Model,
    ReferenceModel,
    UnsupportedCapabilityError,
    accumulate,
    build_request,
    errors,
)
from modelir.interface import ModelInterface
from modelir.pipeline.prepare import Pipeline
from modelir.records import files as records
from modelir.records.files import RecordWriter
from modelir.records.provenance import provenance_problems
from modelir.records.recording import record_of
from modelir.registry import build_transport
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.transports.anthropic.messages import AnthropicMessages
from modelir.transports.base import RawEvent
from modelir.v1 import content_pb2, record_pb2, request_pb2, stream_pb2

# ---- sync streaming is incremental -------------------------------------------------------------------------


class _GatedStream(ModelInterface):
    """A model whose second event is produced only after the consumer has the first one (or after `patience`).

    A sync `stream()` that collects the whole stream first never lets the consumer see the first event early, so
    the gate times out and `gate_was_open` stays False.
    """

    name = "gated"

    def __init__(self, patience: float = 5.0) -> None:
        self.first_seen = threading.Event()
        self.patience = patience
        self.gate_was_open: bool | None = None
        self.closed = False

    @property
    def capabilities(self):
        return ReferenceModel().manifest()

    async def arun(self, request, *, deadline=None):
        raise NotImplementedError

    async def astream(self, request, *, deadline=None):
        try:
            yield stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id="first"))
            self.gate_was_open = await asyncio.to_thread(self.first_seen.wait, self.patience)
            for index in range(3):
                await asyncio.sleep(0.01)  # spaced in time, as a provider's events are
                yield stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=0, text=f"t{index}"))
            yield stream_pb2.StreamEvent(end=stream_pb2.StreamEnd())
        finally:
            self.closed = True

    async def avalidate(self, request):
        raise NotImplementedError

    async def atokenize_request(self, request):
        raise NotImplementedError


def test_sync_stream_yields_the_first_event_before_the_rest_exists():
    model = _GatedStream()
    kinds = []
    for event in model.stream(build_request("", prompt="x")):
        kinds.append(event.WhichOneof("event"))
        model.first_seen.set()
    assert kinds == ["start", "delta", "delta", "delta", "end"]
    assert model.gate_was_open is True  # the consumer had event one while event two did not exist yet


def test_leaving_a_sync_stream_early_closes_it_on_its_loop():
    model = _GatedStream(patience=0.01)
    for _ in model.stream(build_request("", prompt="x")):
        break
    assert model.closed


def test_sync_stream_of_a_real_model_folds_to_its_unary_answer():
    model = Model(ReferenceModel(), name="reference")
    request = build_request("", prompt="Once", max_output_tokens=12, seed=3)
    streamed = accumulate(list(model.stream(request)))
    unary = model.run(request)
    for response in (streamed, unary):
        response.ClearField("timing")
    assert streamed == unary
    with pytest.raises(InvalidRequestError):  # an invalid request raises from the sync stream too
        list(model.stream(build_request("", prompt="x", top_p=3)))


# ---- local and remote agree on a request that names another model ----------------------------------------


@pytest.fixture
async def two_models_served():
    models = {"reference": Model(ReferenceModel(), name="reference"), "other": Model(ReferenceModel(), name="other")}
    server, port = await build_server(models, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "reference")
    yield remote
    await remote.aclose()
    await server.stop(None)


async def test_local_and_remote_refuse_a_request_for_another_model_alike(two_models_served):
    remote = two_models_served
    local = Model(ReferenceModel(), name="reference")
    request = build_request("other", prompt="x", max_output_tokens=3)  # "other" is served: remote used to run it
    outcomes = []
    for model in (local, remote):
        with pytest.raises(InvalidRequestError) as refused:
            await model.arun(request)
        with pytest.raises(InvalidRequestError):
            async for _ in model.astream(request):
                pass
        verdict = await model.avalidate(request)
        assert not verdict.accepted
        violation = refused.value.violations[0]
        assert violation.field == "model"
        assert "'other'" in violation.description and "'reference'" in violation.description
        outcomes.append((list(refused.value.violations), list(verdict.field_violations)))
    assert outcomes[0] == outcomes[1]
    for model in (local, remote):  # an empty name, or the model's own, runs
        for name in ("", "reference"):
            response = await model.arun(build_request(name, prompt="x", max_output_tokens=3))
            assert response.choices


# ---- field checks before any I/O -------------------------------------------------------------------------


async def test_a_negative_seed_is_a_named_field_error_locally_and_over_grpc(two_models_served):
    remote = two_models_served
    local = Model(ReferenceModel(), name="reference")
    for model in (local, remote):
        with pytest.raises(InvalidRequestError) as refused:
            await model.arun(build_request("", prompt="x", seed=-1))
        assert [v.field for v in refused.value.violations] == ["sampling.seed"]
        assert "[0, 9223372036854775807]" in refused.value.violations[0].description


def test_llamacpp_refuses_the_seed_that_means_random():
    transport = build_transport("llamacpp", {})
    for seed in (-1, 2**32 - 1):
        with pytest.raises(InvalidRequestError) as refused:
            Pipeline(transport).check(build_request("m", prompt="x", seed=seed))
        assert [v.field for v in refused.value.violations] == ["sampling.seed"]
    Pipeline(transport).check(build_request("m", prompt="x", seed=2**32 - 2))


@pytest.mark.parametrize("labels", [["yes"], ["yes", "yes"]])
def test_a_choice_needs_two_distinct_labels(labels):
    request = build_request("", prompt="x")
    request.constraint.choice.labels.extend(labels)
    with pytest.raises(InvalidRequestError) as refused:
        Pipeline(ReferenceModel()).check(request)
    assert [v.field for v in refused.value.violations] == ["constraint.choice.labels"]
    assert "two distinct labels" in refused.value.violations[0].description


def _claude_conversation(policy: request_pb2.ForeignArtifactPolicy.ValueType) -> request_pb2.Request:
    request = build_request("gpt-4o-mini", messages=[("user", "Capital of France?")])
    turn = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    thinking = turn.parts.add()
    thinking.reasoning.text = "Paris, surely."
    thinking.artifacts.add(
        kind=content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE,
        data=b"EqEECkYI",
        issuer=content_pb2.Issuer(transport="anthropic_messages", model="claude-sonnet-4-5"),
    )
    turn.parts.add(text="Paris.")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="And of Spain?")
    request.foreign_artifact_policy = policy
    return request


def test_drop_applies_before_the_capability_check():
    chat = build_transport("openai_chat", {"provider_model": "gpt-4o-mini"})
    pipeline = Pipeline(chat, model="gpt-4o-mini")
    checked, warnings = pipeline.check(_claude_conversation(request_pb2.FOREIGN_ARTIFACT_POLICY_DROP))
    assert [w.code for w in warnings] == ["foreign_reasoning_dropped"]
    assert [p.WhichOneof("content") for m in checked.conversation.messages for p in m.parts] == ["text"] * 3
    assert pipeline.report(_claude_conversation(request_pb2.FOREIGN_ARTIFACT_POLICY_DROP)).accepted
    with pytest.raises((UnsupportedCapabilityError, errors.ForeignArtifactError)) as refused:
        pipeline.check(_claude_conversation(request_pb2.FOREIGN_ARTIFACT_POLICY_UNSPECIFIED))
    assert "FOREIGN_ARTIFACT_POLICY_DROP" in str(refused.value)
    verdict = pipeline.report(_claude_conversation(request_pb2.FOREIGN_ARTIFACT_POLICY_UNSPECIFIED))
    assert any("FOREIGN_ARTIFACT_POLICY_DROP" in reason for reason in verdict.unsupported.reasons)


# ---- reasoning effort on Claude: the warning travels in streams too ----------------------------------------


def test_a_mapped_effort_is_reported_at_the_end_of_a_stream():
    transport = AnthropicMessages(provider_model="claude-sonnet-4-5")
    request = build_request("c", messages=[("user", "x")], reasoning="medium")
    prepared = Pipeline(transport).prepare(request, streaming=True)
    assert prepared.native is not None and b'"budget_tokens":8192' in prepared.native.body
    lifter = transport.stream_lifter(prepared.request)
    lifter.feed(RawEvent("message_start", b'{"type":"message_start","message":{"id":"m","model":"c","usage":{}}}'))
    lifter.feed(RawEvent("message_stop", b'{"type":"message_stop"}'))
    (end,) = lifter.close()
    assert [w.code for w in end.end.warnings] == ["reasoning_effort_mapped"]
    assert "budget_tokens = 8192" in end.end.warnings[0].message


# ---- records verify flags records with empty provenance ----------------------------------------------------


def test_records_verify_flags_empty_and_incomplete_provenance(tmp_path):
    model = Model(ReferenceModel(), name="reference")
    request = build_request("", prompt="x", max_output_tokens=3)
    full = record_of(model, request, response=model.run(request), key="full")
    empty = record_pb2.Record(key="bare", request=request, status=record_pb2.RECORD_STATUS_OK)
    partial = record_pb2.Record(key="half", request=request, status=record_pb2.RECORD_STATUS_OK)
    partial.provenance.ir_version = full.provenance.ir_version
    path = tmp_path / "out.jsonl"
    with RecordWriter.create(path) as writer:
        for record in (full, empty, partial):
            writer.append(record)
    problems = provenance_problems(records.scan(path).records)
    assert problems == [
        "record 1 (key 'bare') has empty provenance",
        "record 2 (key 'half') has no provenance sdk_version, transport, configured_model",
    ]
    verify = subprocess.run(
        [sys.executable, "-m", "modelir.cli", "records", "verify", str(path)], capture_output=True, text=True
    )
    assert verify.returncode == 1
    assert "problem: record 1 (key 'bare') has empty provenance" in verify.stdout
    assert verify.stdout.strip().endswith("NOT ok")


def test_records_verify_caps_its_provenance_lines():
    bare = [record_pb2.Record(key=f"k{i}") for i in range(25)]
    problems = provenance_problems(bare)
    assert len(problems) == 21 and problems[-1] == "... and 5 more records with incomplete provenance"
