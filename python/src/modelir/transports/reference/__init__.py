"""The reference model: a built-in, deterministic language model that needs no network and no weights.

It is a byte-level bigram model. Token ids 0-255 are bytes, 256 is BOS and 257 is EOS. A fixed random table of
next-token logits (seeded once, identical on every machine) gives a real probability distribution at every
position, so logprobs, top-k alternatives and input scores are genuine, and sampling is seeded and reproducible.
Free text is sampled from printable ASCII, newline and EOS. Everything it claims in its manifest it honours for
real; whatever it cannot (regex and grammar constraints, FIM, penalties, images) its manifest does not claim.

The rooms: `vocabulary` (tokens and the table), `sampler`, `json_emitter` (schema-constrained output),
`template` (the prompt and chat template), `sealing` (reasoning artifacts), `scoring` (logprob columns, input
scores), `generation` (one response) and `transport` (`ReferenceModel`).
"""

from modelir.transports.reference.generation import DEFAULT_MAX_OUTPUT_TOKENS
from modelir.transports.reference.transport import MAX_CHOICES, ReferenceModel
from modelir.transports.reference.vocabulary import BOS, EOS, MAX_TOP_LOGPROBS, PIECES, VOCAB, logprob_table

__all__ = [
    "BOS",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "EOS",
    "MAX_CHOICES",
    "MAX_TOP_LOGPROBS",
    "PIECES",
    "VOCAB",
    "ReferenceModel",
    "logprob_table",
]
