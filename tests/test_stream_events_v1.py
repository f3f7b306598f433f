"""What every stream the SDK yields carries: a sequence number on each event, a `PartDone` after each completed
part (the reference model's unfold), and the warnings known at the start on `StreamStart`."""

from __future__ import annotations

from modelir import Model, ReferenceModel, accumulate, build_request
from modelir.v1 import content_pb2, request_pb2


async def test_every_event_has_its_sequence_number_and_parts_are_marked_done():
    model = Model(ReferenceModel(), name="reference")
    request = build_request("reference", messages=[("user", "think, then call get_weather")], n=2, seed=3)
    request.tools.add(function=request_pb2.FunctionTool(name="get_weather", parameters_json_schema='{"type":"object"}'))
    request.reasoning_controls.effort = request_pb2.REASONING_EFFORT_LOW
    request.reasoning_controls.include_thoughts = True
    events = [event async for event in model.astream(request)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    unary = await model.arun(request)
    done = [(e.part_done.choice_index, e.part_done.part_index) for e in events if e.WhichOneof("event") == "part_done"]
    assert done == [(c.index, j) for c in unary.choices for j in range(len(c.message.parts))]
    for position, event in enumerate(events):  # a part is done only after its last delta
        if event.WhichOneof("event") == "part_done":
            later = [
                e.delta
                for e in events[position + 1 :]
                if e.WhichOneof("event") == "delta" and e.delta.WhichOneof("content") is not None
            ]
            assert all(
                (d.choice_index, d.part_index) != (event.part_done.choice_index, event.part_done.part_index)
                for d in later
            )
    streamed = accumulate(events)
    streamed.ClearField("timing")
    unary.ClearField("timing")
    assert streamed == unary


async def test_warnings_known_at_the_start_come_on_the_start_event():
    model = Model(ReferenceModel(), name="reference")
    foreign = content_pb2.Part(reasoning=content_pb2.Reasoning(text="elsewhere"))
    foreign.artifacts.add(
        kind=content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE,
        data=b"sig",
        issuer=content_pb2.Issuer(transport="anthropic_messages", model="claude"),
    )
    request = build_request("reference", messages=[("user", "hi")], max_output_tokens=5)
    turn = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    turn.parts.append(foreign)
    turn.parts.add(text="ok")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="again")
    request.foreign_artifact_policy = request_pb2.FOREIGN_ARTIFACT_POLICY_DROP
    events = [event async for event in model.astream(request)]
    start, end = events[0].start, events[-1].end
    assert start.warnings and not end.warnings
    assert list(accumulate(events).warnings) == list((await model.arun(request)).warnings)
