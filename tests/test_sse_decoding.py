"""The incremental SSE decoder (`http.decoding.SseDecoder`) against the event-stream rules: line endings (LF, CR,
CRLF, a CRLF split across reads), multi-line data, comments, the BOM, `id` / `retry` / unknown fields, events with
no data, a stream cut inside an event, and bytes that are not UTF-8, whatever the pieces the bytes arrive in."""

from __future__ import annotations

import pytest
from modelir.http.decoding import SseDecoder
from modelir.transports.base import RawEvent


def _decode(*pieces: bytes) -> list[RawEvent]:
    decoder = SseDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def _every_split(stream: bytes) -> list[list[RawEvent]]:
    """The events of `stream` fed whole, byte by byte, and cut in two at every position."""
    return [
        _decode(stream),
        _decode(*[stream[i : i + 1] for i in range(len(stream))]),
        *(_decode(stream[:cut], stream[cut:]) for cut in range(1, len(stream))),
    ]


@pytest.mark.parametrize("newline", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
def test_every_line_ending_and_every_split_give_the_same_events(newline):
    stream = newline.join(
        [b"data: one", b"", b"event: delta", b'data: {"a":', b"data: 1}", b"", b": a comment", b"data:x", b"", b""]
    )
    expected = [RawEvent("", b"one"), RawEvent("delta", b'{"a":\n1}'), RawEvent("", b"x")]
    for events in _every_split(stream):
        assert events == expected


def test_a_crlf_split_across_reads_is_one_line_ending_and_the_event_leaves_with_its_blank_line():
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [RawEvent("", b"a")]  # the CR ending the piece ended the blank line: no waiting
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [RawEvent("", b"b")]  # that LF was the CR's half, not a blank line


def test_comments_ids_retries_and_unknown_fields_are_not_events_and_an_event_needs_data():
    stream = b": keep-alive\n\nid: 7\nretry: 1000\n\nevent: ping\n\nfoo: bar\ndata: kept\nid: 8\n\n"
    for events in _every_split(stream):
        assert events == [RawEvent("", b"kept")]  # `event: ping` without data is no event, and its name is dropped


def test_one_space_after_the_colon_is_dropped_and_a_line_without_a_colon_is_a_field_with_no_value():
    assert _decode(b"data:  two spaces\ndata\ndata:\n\n") == [RawEvent("", b" two spaces\n\n")]


def test_the_message_event_name_is_the_default_and_names_are_kept():
    assert _decode(b"event: message\ndata: a\n\nevent: content_block_delta\ndata: b\n\n") == [
        RawEvent("", b"a"),
        RawEvent("content_block_delta", b"b"),
    ]


def test_one_leading_bom_is_dropped_even_split_across_reads():
    stream = b"\xef\xbb\xbfdata: a\n\n"
    for events in _every_split(stream):
        assert events == [RawEvent("", b"a")]
    assert _decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []  # a second BOM is part of the first line's name


def test_an_event_the_stream_ends_inside_is_never_dispatched():
    assert _decode(b"data: whole\n\ndata: cut") == [RawEvent("", b"whole")]
    assert _decode(b"data: whole\n\ndata: cut\n") == [RawEvent("", b"whole")]


def test_bytes_that_are_not_utf8_are_replaced_and_flagged_and_a_character_split_across_reads_is_whole():
    assert _decode(b"data: caf\xff\n\ndata: ok\n\n") == [
        RawEvent("", "caf\ufffd".encode(), damaged=True),
        RawEvent("", b"ok"),
    ]
    for events in _every_split("data: é€😀\n\n".encode()):
        assert events == [RawEvent("", "é€😀".encode())]
