"""The media-URI check finds a URI wherever a `Blob` can sit (a tool result's parts included), and passes a request
without one without building any field path."""

from __future__ import annotations

import pytest
from modelir import build_request, errors
from modelir.pipeline.media_policy import _blob_fields, _has_uri, check
from modelir.v1 import content_pb2, request_pb2


def test_a_uri_inside_a_tool_result_is_found_and_named():
    request = build_request("reference", messages=[("user", "look")])
    result = request.conversation.messages.add(role=content_pb2.ROLE_TOOL).parts.add().tool_result
    result.tool_call_id = "call-1"
    result.content.add(text="see")
    result.content.add(blob=content_pb2.Blob(mime_type="image/png", uri="file:///etc/shadow"))
    assert _has_uri(request)
    with pytest.raises(errors.InvalidRequestError) as caught:
        check(request)
    assert caught.value.violations[0].field == "conversation.messages[1].parts[0].tool_result.content[1].blob.uri"


def test_inline_data_and_text_only_requests_have_no_uri():
    request = build_request("reference", messages=[("user", "look")])
    request.conversation.messages[0].parts.add(blob=content_pb2.Blob(mime_type="image/png", data=b"\x89PNG"))
    assert not _has_uri(request)
    check(request)


def test_only_fields_that_can_hold_a_blob_are_entered():
    entered = dict(_blob_fields(request_pb2.Request))
    assert entered.get("conversation") is False and "sampling" not in entered and "tools" not in entered
    part = dict(_blob_fields(content_pb2.Part))  # the spec may add kinds that hold parts: those are entered too
    assert part.get("blob") is False and part.get("tool_result") is False and "artifacts" not in part
