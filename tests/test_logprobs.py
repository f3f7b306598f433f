"""The columnar logprob builders: every shape variant gives the exact columns, on the fast path and off it."""

from __future__ import annotations

import math

import pytest
from modelir.logprobs import build as lp
from modelir.transports.openai.completions import OpenAICompletions
from modelir.transports.vllm import VLLM
from modelir.v1 import response_pb2


def _entry(token: str, logprob: float, *, raw: list[int] | str | None = "utf8", tops=None, **extra) -> dict:
    entry = {"token": token, "logprob": logprob, **extra}
    if raw != "absent":
        entry["bytes"] = list(token.encode()) if raw == "utf8" else raw
    if tops is not None:
        entry["top_logprobs"] = tops
    return entry


def test_complete_shape_gives_every_column():
    entries = [
        _entry("Hi", -0.5, tops=[_entry("Hi", -0.5), _entry("Hey", -1.5)]),
        _entry(" é", -0.25, tops=[_entry(" é", -0.25)]),
    ]
    out = lp.from_openai_content(entries)
    assert list(out.tokens) == ["Hi", " é"]
    assert list(out.token_logprobs) == [-0.5, -0.25]
    assert out.token_bytes == "Hi é".encode() and list(out.token_byte_offsets) == [0, 2]
    assert list(out.top_counts) == [2, 1]
    assert list(out.top_tokens) == ["Hi", "Hey", " é"]
    assert list(out.top_logprobs) == [-0.5, -1.5, -0.25]
    assert out.top_token_bytes == "HiHey é".encode() and list(out.top_token_byte_offsets) == [0, 2, 5]
    assert not out.token_ids and not out.top_token_ids


def test_partial_utf8_bytes_are_kept_as_sent_not_taken_from_the_token_string():
    # A token that is half of a multi-byte character: its string is a stand-in, its bytes are the truth.
    entries = [_entry("\\xe2\\x80", -1.0, raw=[0xE2, 0x80]), _entry("\\x94", -2.0, raw=[0x94])]
    out = lp.from_openai_content(entries)
    assert out.token_bytes == "—".encode() and list(out.token_byte_offsets) == [0, 2]
    assert lp.text_of(out) == "—"


def test_missing_or_null_bytes_fall_back_to_the_token_utf8_per_token():
    entries = [_entry("a", -1.0, raw=None), _entry("bc", -2.0, raw="absent"), _entry("d", -3.0, raw=[0x64])]
    out = lp.from_openai_content(entries)
    assert out.token_bytes == b"abcd" and list(out.token_byte_offsets) == [0, 1, 3]


def test_alternatives_missing_or_null_on_some_entries_count_as_none():
    entries = [_entry("a", -1.0, tops=[_entry("a", -1.0)]), _entry("b", -2.0, tops=None), _entry("c", -3.0)]
    entries[1]["top_logprobs"] = None
    out = lp.from_openai_content(entries)
    assert list(out.top_counts) == [1, 0, 0]
    assert list(out.top_tokens) == ["a"] and out.top_token_bytes == b"a"


def test_no_alternatives_requested_leaves_the_top_columns_empty():
    out = lp.from_openai_content([_entry("a", -1.0), _entry("b", -2.0)])
    assert not out.top_counts and not out.top_tokens and not out.top_token_bytes


def test_an_empty_list_of_alternatives_is_still_counted():
    out = lp.from_openai_content([_entry("a", -1.0, tops=[]), _entry("b", -2.0, tops=[])])
    assert list(out.top_counts) == [0, 0] and not out.top_tokens


def test_llama_cpp_token_ids_fill_the_id_columns():
    entries = [_entry("a", -1.0, id=64, tops=[_entry("a", -1.0, id=64), _entry("b", -2.0, id=65)])]
    out = lp.from_openai_content(entries)
    assert list(out.token_ids) == [64] and list(out.top_token_ids) == [64, 65]


def test_into_fills_the_given_field_and_equals_a_fresh_build():
    entries = [_entry("x", -1.0, tops=[_entry("x", -1.0), _entry("y", -2.0)])]
    choice = response_pb2.Choice()
    returned = lp.from_openai_content(entries, into=choice.logprobs)
    assert choice.logprobs == lp.from_openai_content(entries)
    assert returned is choice.logprobs or returned == choice.logprobs


def test_without_bytes_leaves_the_byte_columns_empty():
    out = lp.from_openai_content([_entry("a", -1.0, tops=[_entry("a", -1.0)])], with_bytes=False)
    assert not out.token_bytes and not out.token_byte_offsets and not out.top_token_bytes


def test_a_wrong_type_is_an_error_not_a_silent_value():
    with pytest.raises((TypeError, ValueError)):
        lp.from_openai_content([_entry("a", -1.0, raw="not a list")])


@pytest.mark.parametrize(
    ("transport", "values", "expected"),
    [
        (OpenAICompletions(provider_model="m"), [-1.0, -2.0], [-1.0, -2.0]),
        (OpenAICompletions(provider_model="m"), [None, -2.0], [math.nan, -2.0]),
        (OpenAICompletions(provider_model="m"), [-9999.0], [-9999.0]),  # only vLLM clamps there
        (VLLM(provider_model="m"), [-1.0, -9999.0], [-1.0, -math.inf]),
        (VLLM(provider_model="m"), [None, -10000.0, -0.5], [math.nan, -math.inf, -0.5]),
        (VLLM(provider_model="m"), [], []),
    ],
)
def test_logprob_columns_map_none_to_nan_and_vllm_clamps_to_minus_infinity(transport, values, expected):
    transport = getattr(transport, "_completions", transport)
    column = transport.columns({"tokens": ["t"] * len(values), "token_logprobs": values}).token_logprobs
    assert len(column) == len(expected)
    for got, want in zip(column, expected, strict=True):
        assert (math.isnan(got) and math.isnan(want)) or got == want
