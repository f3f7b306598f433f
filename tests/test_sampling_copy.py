"""`transports._common.copy_sampling`: the sampling fields a request sets go into a native body under the wire's
names, in the order the wire lists them, whatever order the request set them in (the fixtures pin the bytes)."""

from __future__ import annotations

import orjson
from modelir.transports import _common as common
from modelir.v1 import request_pb2

_FIELDS = "temperature top_p seed max_output_tokens:max_tokens stop stop_token_ids choice_count:n"


def test_set_fields_go_in_the_wires_order_under_its_names():
    sampling = request_pb2.SamplingParams(seed=7, max_output_tokens=0, temperature=0.0, choice_count=3)
    sampling.stop.append("END")
    body: dict = {"model": "m"}
    common.copy_sampling(sampling, body, _FIELDS)
    # set to zero still counts as set (explicit presence); the list fields are plain lists
    assert orjson.dumps(body) == b'{"model":"m","temperature":0.0,"seed":7,"max_tokens":0,"stop":["END"],"n":3}'


def test_what_is_unset_empty_or_one_choice_stays_out():
    sampling = request_pb2.SamplingParams(choice_count=1)
    body: dict = {}
    common.copy_sampling(sampling, body, _FIELDS)
    common.copy_sampling(request_pb2.SamplingParams(), body, _FIELDS)
    assert body == {}
    sampling.stop_token_ids.extend([2, 3])
    common.copy_sampling(sampling, body, _FIELDS)
    assert body == {"stop_token_ids": [2, 3]}
    assert type(body["stop_token_ids"]) is list
