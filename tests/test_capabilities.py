"""Fail-closed validation: every unsupported feature and every exceeded limit is named, all at once."""

from __future__ import annotations

import pytest
from modelir import InvalidRequestError, UnsupportedCapabilityError, build_request, message
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2

C = capabilities_pb2.Capability


def _everything_the_reference_lacks() -> request_pb2.Request:
    request = build_request("reference", prompt="def f(", n=20, top_logprobs=25)
    request.fim.suffix = "):\n    pass"
    request.sampling.presence_penalty = 0.5
    request.sampling.repetition_penalty = 1.1
    request.constraint.regex = "[a-z]+"
    request.provider_options.add(transport="reference", options_json='{"x": 1}')
    return request


async def test_reference_rejects_every_unsupported_feature_naming_all(reference):
    request = _everything_the_reference_lacks()
    with pytest.raises(UnsupportedCapabilityError) as caught:
        await reference.arun(request)
    error = caught.value
    assert set(error.missing) == {
        C.CAPABILITY_FIM,
        C.CAPABILITY_PRESENCE_FREQUENCY_PENALTIES,
        C.CAPABILITY_REPETITION_PENALTY,
        C.CAPABILITY_CONSTRAINT_REGEX,
        C.CAPABILITY_PROVIDER_OPTIONS,
    }
    limits = {v.limit: (v.allowed, v.requested) for v in error.unsupported.limit_violations}
    assert limits == {"max_choices": (16, 20), "max_top_logprobs": (20, 25)}
    for name in ("FIM", "PRESENCE_FREQUENCY_PENALTIES", "REPETITION_PENALTY", "CONSTRAINT_REGEX"):
        assert name in str(error)


@pytest.mark.parametrize(
    ("mutate", "capability"),
    [
        (
            lambda r: (
                r.constraint.grammar.SetInParent()
                or setattr(r.constraint.grammar, "text", "root ::= x")
                or setattr(r.constraint.grammar, "dialect", request_pb2.GRAMMAR_DIALECT_GBNF)
            ),
            C.CAPABILITY_CONSTRAINT_GRAMMAR,
        ),
        (
            lambda r: (
                r.conversation.messages.add(role=content_pb2.ROLE_USER)
                .parts.add()
                .blob.CopyFrom(content_pb2.Blob(mime_type="image/png", data=b"\x89PNG"))
            ),
            C.CAPABILITY_IMAGE_INPUT,
        ),
        (lambda r: setattr(r.sampling, "frequency_penalty", 0.1), C.CAPABILITY_PRESENCE_FREQUENCY_PENALTIES),
        # IR 1.1's request fields: a transport that does not claim them rejects them, never runs without them.
        (lambda r: setattr(r, "service_tier", "flex"), C.CAPABILITY_SERVICE_TIER),
        (lambda r: setattr(r, "priority", -1), C.CAPABILITY_PRIORITY),
        (lambda r: setattr(r, "adapter", "sql-lora"), C.CAPABILITY_ADAPTERS),
        (
            lambda r: setattr(r.reasoning_controls, "effort", request_pb2.REASONING_EFFORT_XHIGH),
            C.CAPABILITY_REASONING_EFFORT_XHIGH,
        ),
    ],
)
async def test_each_rejection_names_its_capability(reference, mutate, capability):
    request = build_request("reference", messages=[("user", "hi")])
    mutate(request)
    with pytest.raises(UnsupportedCapabilityError) as caught:
        await reference.arun(request)
    assert list(caught.value.missing) == [capability]


async def test_unsupported_json_schema_keywords_are_named(reference):
    request = build_request(
        "reference", messages=[("user", "x")], json_schema='{"type":"string","pattern":"^a+$","minLength":2}'
    )
    with pytest.raises(UnsupportedCapabilityError, match="minLength, pattern"):
        await reference.arun(request)


async def test_invalid_fields_are_all_reported(reference):
    request = build_request("reference", messages=[message("user", "x")], temperature=-1, top_p=2.0)
    request.tool_choice.tool_name = "missing"
    request.conversation.messages.add()  # no role
    with pytest.raises(InvalidRequestError) as caught:
        await reference.arun(request)
    fields = {v.field for v in caught.value.violations}
    assert {"sampling.temperature", "sampling.top_p", "tool_choice.tool_name", "tool_choice"} <= fields
    assert "conversation.messages[1].role" in fields


async def test_validate_reports_without_running(reference):
    request = _everything_the_reference_lacks()
    result = await reference.avalidate(request)
    assert not result.accepted
    assert C.CAPABILITY_FIM in result.required
    assert C.CAPABILITY_FIM in result.unsupported.missing
    ok = await reference.avalidate(build_request("reference", prompt="hi", top_logprobs=5))
    assert ok.accepted and not ok.unsupported.missing


async def test_streaming_is_a_capability(reference):
    from modelir import Model
    from modelir.pipeline.capabilities import narrow

    narrowed = Model(reference.transport, manifest=narrow(reference.capabilities, [C.CAPABILITY_STREAMING]))
    with pytest.raises(UnsupportedCapabilityError, match="STREAMING"):
        async for _ in narrowed.astream(build_request("reference", prompt="x")):
            pass
