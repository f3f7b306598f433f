"""Replaying the real Responses hosted-tool recordings (`shared/wire/openai_responses/server_tools/`): each hosted
item becomes a server tool call and its result, annotations become citations with byte spans, streams fold to the
unary answer, and a lifted turn replays to the service as the recorded client sent it."""

from __future__ import annotations

import base64
import json

import orjson
import pytest
from modelir import accumulate
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.openai.responses import OpenAIResponses
from modelir.v1 import content_pb2, request_pb2

from tests.recordings import cassette, wire_dir

HOSTED = {
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_list_tools",
    "mcp_call",
}


def _request(model: str = "m") -> request_pb2.Request:
    request = request_pb2.Request(model=model)
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
    return request


def _responses_exchanges():
    for path in sorted(wire_dir("openai_responses").glob("server_tools/*.yaml")):
        for exchange in cassette(path):
            if exchange.status == 200 and (exchange.sse is not None or b'"output"' in exchange.body):
                yield path.name, exchange


def _expected_kinds(output: list[dict]) -> list[tuple[str, str]]:
    kinds = []
    for item in output:
        if item["type"] in HOSTED:
            kinds += [("server_tool_call", item["id"]), ("server_tool_result", "")]
        elif item["type"] == "reasoning":
            kinds.append(("reasoning", item["id"]))
        elif item["type"] == "message":
            kinds += [("text" if c["type"] == "output_text" else "refusal", item["id"]) for c in item["content"]]
        else:
            kinds.append(("tool_call", item["id"]))
    return kinds


def test_hosted_items_lift_as_calls_and_results_and_streams_fold_to_the_final_object():
    transport = OpenAIResponses()
    seen_types: set[str] = set()
    streams = 0
    for name, exchange in _responses_exchanges():
        if exchange.sse is None:
            body = json.loads(exchange.body)
            response = transport.lift(_request(), HttpResponse(200, exchange.headers, exchange.body))
        else:
            streams += 1
            lifter = transport.stream_lifter(_request())
            events = [e for kind, data in exchange.sse for e in lifter.feed(RawEvent(kind, data.encode()))]
            streamed = accumulate([*events, *lifter.close()])
            body = next(json.loads(d)["response"] for _, d in exchange.sse if '"response.completed"' in d)
            response = transport.lift(_request(), HttpResponse(200, {}, json.dumps(body).encode()))
            assert streamed == response, name
            # Hosted items arrive as whole parts (a call and its result), from `output_item.done`.
            whole = [e for e in events if e.WhichOneof("event") == "delta" and e.delta.WhichOneof("content") == "part"]
            assert len(whole) == 2 * sum(item["type"] in HOSTED for item in body["output"]), name
        parts = list(response.choices[0].message.parts)
        assert [(p.WhichOneof("content"), p.item_id) for p in parts] == _expected_kinds(body["output"]), name
        assert not response.warnings, name  # nothing is left behind as "not lifted"
        hosted = [item for item in body["output"] if item["type"] in HOSTED]
        results = [p.server_tool_result for p in parts if p.WhichOneof("content") == "server_tool_result"]
        for item, result in zip(hosted, results, strict=True):
            seen_types.add(item["type"])
            native = orjson.loads(result.result_json)
            assert native == {
                k: v for k, v in item.items() if not (item["type"] == "image_generation_call" and k == "result")
            }
            assert result.tool_call_id == item["id"]
    assert seen_types == HOSTED
    assert streams >= 3


def test_url_citations_cover_the_same_text_in_bytes_as_in_characters():
    (exchange,) = [
        e for e in cassette(wire_dir("openai_responses") / "server_tools/pydanticai__web_search_call_url_citation.yaml")
    ]
    body = json.loads(exchange.body)
    content = next(c for item in body["output"] if item["type"] == "message" for c in item["content"])
    response = OpenAIResponses().lift(_request(), HttpResponse(200, {}, exchange.body))
    text_part = next(p for p in response.choices[0].message.parts if p.WhichOneof("content") == "text")
    assert len(text_part.citations) == len(content["annotations"]) == 3
    raw = text_part.text.encode()
    for cited, annotation in zip(text_part.citations, content["annotations"], strict=True):
        assert cited.kind == content_pb2.CITATION_KIND_URL and cited.url == annotation["url"]
        span = raw[cited.start_byte : cited.end_byte].decode()
        assert span == content["text"][annotation["start_index"] : annotation["end_index"]]
        assert not cited.native_json  # every member of a url_citation has its field
    # The recording has characters of several UTF-8 lengths before the spans: bytes and characters differ there.
    assert any(
        c.start_byte != a["start_index"] for c, a in zip(text_part.citations, content["annotations"], strict=True)
    )


def test_a_file_citation_is_a_position_and_file_search_results_are_readable():
    exchanges = list(_responses_exchanges())
    (exchange,) = [e for name, e in exchanges if name.startswith("pydanticai__file_search")]
    response = OpenAIResponses().lift(_request(), HttpResponse(200, {}, exchange.body))
    parts = response.choices[0].message.parts
    result = next(p.server_tool_result for p in parts if p.WhichOneof("content") == "server_tool_result")
    assert result.content[0].text == "Paris is the capital of France. It is known for the Eiffel Tower."
    text = next(p for p in parts if p.WhichOneof("content") == "text")
    (cited,) = text.citations
    assert cited.kind == content_pb2.CITATION_KIND_FILE and cited.filename == "tmpd_9a5dki.txt"
    assert cited.start_byte == cited.end_byte == len("The capital of France is Paris")


def test_a_generated_image_is_a_blob_of_its_output_format():
    (exchange,) = cassette(wire_dir("openai_responses") / "server_tools/pydanticai__image_generation_call.yaml")
    item = next(i for i in json.loads(exchange.body)["output"] if i["type"] == "image_generation_call")
    response = OpenAIResponses().lift(_request(), HttpResponse(200, {}, exchange.body))
    result = next(
        p.server_tool_result
        for p in response.choices[0].message.parts
        if p.WhichOneof("content") == "server_tool_result"
    )
    (image,) = result.content
    assert image.blob.mime_type == "image/jpeg" and image.blob.data[:2] == b"\xff\xd8"
    assert image.blob.data == base64.b64decode(item["result"])
    assert "result" not in orjson.loads(result.result_json)  # the base64 is not stored twice


@pytest.mark.parametrize(
    "name", ["pydanticai__code_interpreter_call_roundtrip.yaml", "pydanticai__mcp_list_tools_mcp_call_roundtrip.yaml"]
)
def test_a_turn_with_hosted_tools_replays_as_the_recorded_client_sent_it(name):
    first, second = [e for e in cassette(wire_dir("openai_responses") / "server_tools" / name) if e.status == 200][:2]
    sent_first, sent_second = first.request_body, second.request_body
    transport = OpenAIResponses(provider_model=sent_first["model"])
    request = request_pb2.Request(model=sent_first["model"])
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text=sent_first["input"][0]["content"])
    lifted = transport.lift(request, HttpResponse(200, first.headers, first.body))
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(lifted.choices[0].message)
    recorded = sent_second["input"]
    if recorded[-1].get("role") == "user":
        follow.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text=recorded[-1]["content"])
    assert transport.extra_unsupported(follow) == []
    sent = orjson.loads(transport.lower(follow, stream=False).body)["input"]
    assert len(sent) == len(recorded)
    output = {item.get("id"): item for item in json.loads(first.body)["output"]}
    for ours, theirs in zip(sent, recorded, strict=True):
        # Every member the recorded client sent is sent the same; any other member is the service's own, verbatim.
        for key, value in theirs.items():
            assert ours.get(key) == value, (ours.get("type"), key)
        for key in set(ours) - set(theirs):
            assert ours[key] == output[ours["id"]][key], (ours.get("type"), key)
