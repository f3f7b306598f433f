"""The trajectory of a multi-turn rollout, as an RL trainer consumes it: the whole token sequence, the loss mask,
the sampled tokens' logprobs aligned to it, and each turn's boundaries, read from the rollout's responses or its
record file.

The rule is the spec's (the comment of `Response.prompt_token_ids`, normative): each turn's prompt ids must extend
the sequence so far, which then grows by the prompt's new tokens (mask 0) and the turn's sampled ids (mask 1). A
prompt that does not extend it (re-tokenization drift, a template that re-renders earlier turns) is refused with
`TrajectoryDriftError` naming the turn and the position, never spliced. The TypeScript, Go and Rust clients
implement the same rule; `conformance/trajectories` holds the vector they all agree on.

The arrays are built in one pass: each turn's ids are copied out of the protobuf fields with `np.asarray` (one
`memcpy` under the upb runtime, the cheapest route measured in `reading/view`; varint-packed ids cannot be viewed in
place) and written into their slice of arrays allocated once; the result is views of those, with no further copy.
They are the caller's to keep: later changes to the responses do not reach them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelir.v1 import record_pb2, response_pb2

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Trajectory", "TrajectoryDriftError", "TrajectoryError", "trajectory", "trajectory_from_records"]


class TrajectoryError(ValueError):
    """A rollout that has no trajectory by the spec's rule: `turn` is the index of the turn (response or record,
    from 0) that broke it, `reason` says how."""

    def __init__(self, turn: int, reason: str) -> None:
        super().__init__(f"turn {turn}: {reason}")
        self.turn = turn
        self.reason = reason


class TrajectoryDriftError(TrajectoryError):
    """Turn `turn`'s prompt does not extend the sequence of the turns before it: at `position` the sequence has
    `expected` and the prompt has `found` (-1 where the prompt ended first). The engine did not see the earlier
    turns as they were sampled."""

    def __init__(self, turn: int, position: int, expected: int, found: int) -> None:
        seen = f"has {found}" if found >= 0 else "ends there"
        super().__init__(
            turn,
            f"its prompt does not extend the earlier turns (re-tokenization drift): at position {position} the "
            f"sequence has token {expected}, the prompt {seen}",
        )
        self.position = position
        self.expected = expected
        self.found = found


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A rollout's tokens, one entry per position of the whole sequence, and its turns' boundaries.

    `tokens` (int32), `loss_mask` (bool: True where the model sampled the token) and `logprobs` (float32: the
    sampled token's logprob, NaN where the token was not sampled or its logprob was not reported) have one entry
    per position. `boundaries` (int64, `[turns, 3]`) holds each turn's `prompt_start`, `sampled_start` and `end`:
    the turn's new prompt tokens are `[prompt_start, sampled_start)` and its sampled tokens `[sampled_start, end)`.
    """

    tokens: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    boundaries: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def turn_count(self) -> int:
        return len(self.boundaries)

    def __repr__(self) -> str:
        sampled = int(self.loss_mask.sum())
        return f"<Trajectory {len(self)} tokens, {self.turn_count} turns, {sampled} sampled>"


def trajectory(responses: Iterable[response_pb2.Response]) -> Trajectory:
    """The trajectory of a rollout given as its responses, in the order they were made (raises `TrajectoryError`,
    or `TrajectoryDriftError` for a prompt that does not extend the earlier turns)."""
    import numpy as np

    turns = [_turn(i, response) for i, response in enumerate(responses)]
    # A rollout whose prompts extend each other ends where its longest turn ends: allocate that once, keep `[:end]`.
    room = max((len(prompt) + len(choice.sampled_tokens.token_ids) for prompt, choice in turns), default=0)
    tokens = np.empty(room, dtype=np.int32)
    loss_mask = np.zeros(room, dtype=np.bool_)
    logprobs = np.full(room, np.nan, dtype=np.float32)
    boundaries = np.empty((len(turns), 3), dtype=np.int64)
    end = 0
    for i, (prompt, choice) in enumerate(turns):
        prompt_ids = np.asarray(prompt, dtype=np.int32)
        if len(prompt_ids) < end or not np.array_equal(prompt_ids[:end], tokens[:end]):
            raise _drift(i, tokens[:end], prompt_ids)
        sampled = np.asarray(choice.sampled_tokens.token_ids, dtype=np.int32)
        sampled_start, turn_end = len(prompt_ids), len(prompt_ids) + len(sampled)
        tokens[end:sampled_start] = prompt_ids[end:]
        tokens[sampled_start:turn_end] = sampled
        loss_mask[sampled_start:turn_end] = True
        scored = _logprobs(i, choice, sampled)
        logprobs[sampled_start : sampled_start + len(scored)] = scored
        boundaries[i] = (end, sampled_start, turn_end)
        end = turn_end
    return Trajectory(tokens=tokens[:end], loss_mask=loss_mask[:end], logprobs=logprobs[:end], boundaries=boundaries)


def trajectory_from_records(source: str | os.PathLike[str] | Iterable[record_pb2.Record]) -> Trajectory:
    """The trajectory of a rollout given as its record file (either format, read with `records.read_records`) or
    its records: every record, in order, is one turn; a record without a response is refused."""
    if isinstance(source, (str, os.PathLike)):
        from modelir.records import read_records

        records: Iterable[record_pb2.Record] = read_records(source)
    else:
        records = source
    return trajectory(_responses(records))


def _responses(records: Iterable[record_pb2.Record]) -> Iterable[response_pb2.Response]:
    for i, record in enumerate(records):
        if not record.HasField("response"):
            kind = "an Embed call" if record.HasField("embed_request") else "a call that returned no response"
            raise TrajectoryError(i, f"record {record.key!r} is of {kind}: a rollout's turns all have responses")
        yield record.response


def _turn(i: int, response: response_pb2.Response) -> tuple[Sequence[int], response_pb2.Choice]:
    if not response.choices:
        raise TrajectoryError(i, "the response has no choice to continue")
    if not response.prompt_token_ids:
        raise TrajectoryError(i, "the response does not say which prompt token ids the engine saw (prompt_token_ids)")
    choice = response.choices[0]
    if not choice.sampled_tokens.token_ids:
        raise TrajectoryError(i, "its first choice has no sampled token ids (sampled_tokens)")
    return response.prompt_token_ids, choice


def _logprobs(i: int, choice: response_pb2.Choice, sampled: np.ndarray) -> np.ndarray:
    """The logprobs of the first sampled tokens (those the provider scored), checked against the sampled ids."""
    import numpy as np

    columns = choice.logprobs
    scored = np.asarray(columns.token_logprobs, dtype=np.float32)
    if len(scored) > len(sampled):
        raise TrajectoryError(i, f"it has {len(scored)} logprobs for {len(sampled)} sampled tokens")
    if columns.token_ids and not np.array_equal(np.asarray(columns.token_ids, dtype=np.int32), sampled[: len(scored)]):
        raise TrajectoryError(i, "its logprobs' token ids are not the first of its sampled token ids")
    return scored


def _drift(turn: int, sequence: np.ndarray, prompt: np.ndarray) -> TrajectoryDriftError:
    import numpy as np

    shared = min(len(sequence), len(prompt))
    differ = np.flatnonzero(sequence[:shared] != prompt[:shared])
    position = int(differ[0]) if len(differ) else shared
    found = int(prompt[position]) if position < len(prompt) else -1
    return TrajectoryDriftError(turn, position, int(sequence[position]), found)
