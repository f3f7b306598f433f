"""The vocabulary size of a vLLM model, learned from vLLM's own refusal (`ModelInfo.tokenizer`, and the bound that
`Detokenize` checks ids against: vLLM's `/detokenize` answers an id outside the vocabulary with an empty text).

vLLM states its vocabulary size nowhere it answers with a 200: `/v1/models` has `max_model_len` only, `/tokenize`
`count` and `max_model_len`, and `/tokenizer_info` (served only with `--enable-tokenizer-info-endpoint`) is the
tokenizer's `tokenizer_config.json`, whose `added_tokens_decoder` gives some ids but no size. Its request validation
does: a `logit_bias` on an id no vocabulary has is a 400 that says "... out-of-vocab token ids. Vocabulary size: N"
(vLLM 0.32, `SamplingParams._validate_logit_bias`), before anything is generated. That size is the model's
(`model_config.get_vocab_size()`, the rows of its embedding), which a padded vocabulary makes larger than the
tokenizer's: ids between the two are not refused. An answer that names no size (another version's wording, or a 200
from a vLLM that does not validate the bias) leaves the size unknown, which the caller is told of.
"""

from __future__ import annotations

import re

import orjson

from modelir.transports import _common as common
from modelir.transports.base import HttpRequest, HttpResponse
from modelir.v1 import capabilities_pb2

# An id no vocabulary has (the largest int32), so that vLLM's check must refuse it.
_NO_SUCH_ID = 2**31 - 1
_SIZE = re.compile(r"Vocabulary size: (\d+)")


def lower(model: str) -> list[HttpRequest]:
    """A one-token completion of token id 0 with a bias on an id no vocabulary has: refused before it runs."""
    body = {"model": model, "prompt": [0], "max_tokens": 1, "temperature": 0, "logit_bias": {str(_NO_SUCH_ID): 0}}
    return [HttpRequest("POST", "/v1/completions", orjson.dumps(body), (("content-type", "application/json"),))]


def lift(responses: list[HttpResponse]) -> capabilities_pb2.TokenizerInfo:
    """The size vLLM's refusal names; no size (an empty `TokenizerInfo`, kept as the answer) when it names none."""
    answer = responses[0]
    if answer.status != 400:
        return capabilities_pb2.TokenizerInfo()
    body = common.parse_json(answer.body, "error body")
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    found = _SIZE.search(message) if isinstance(message, str) else None
    if found is None or not 0 < int(found[1]) < 2**31:
        return capabilities_pb2.TokenizerInfo()
    return capabilities_pb2.TokenizerInfo(vocabulary_size=int(found[1]))
