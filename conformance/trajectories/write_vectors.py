"""Writes the trajectory conformance vectors (`conformance/trajectories/`): record files of a four-turn
tool-calling rollout of the reference model, and what the spec's trajectory rule (the comment of
`Response.prompt_token_ids`) makes of each, in `expected.json`.

`rollout.jsonl` and `rollout.binpb` hold the rollout done with token input: every earlier assistant turn goes back
as the ids it was sampled as (`Message.token_ids`, which the reference model honours:
`CAPABILITY_MULTI_TURN_TOKEN_INPUT`), so each prompt extends the turns before it. `drift.jsonl` holds the same
rollout done the naive way (the assistant turns go back as their parts, re-rendered by the chat template): the
template writes a tool call as `<tool_call>{...}</tool_call>` where the model sampled only its arguments, so the
second turn's prompt does not extend the first turn, and the rule refuses it at that turn.

The rollout: a user asks for the weather (turn 0 calls `get_weather`), the tool answers (turn 1 writes text), the
user asks for the time (turn 2 calls `get_time`), the tool answers (turn 3 writes text). Each turn asks for sampled
logprobs with token ids. Timings and the records' times are cleared, so that only the header's creation time
changes when the files are written again:

    .venv/bin/python conformance/trajectories/write_vectors.py      (rewrites the files and expected.json)
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from modelir import Model, connect, message, tool_result
from modelir.reading.trajectory import TrajectoryDriftError, trajectory
from modelir.records import BINARY, JSONL, RecordWriter
from modelir.records.recording import record_of
from modelir.v1 import content_pb2, record_pb2, request_pb2, response_pb2
from modelir.writing.tools import tools

HERE = Path(__file__).resolve().parent


def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


def get_time(city: str) -> str:
    """The local time in a city.

    Args:
        city: The city's name.
    """
    return f"noon in {city}"


TOOLS = {"get_weather": get_weather, "get_time": get_time}
# What happens between the model's turns: a user message, or the tool's answer to the call the model just made.
USER_TURNS = {0: "What is the weather in Paris? Call get_weather.", 2: "And the time there? Call get_time."}


def rollout(model: Model, *, token_input: bool) -> list[record_pb2.Record]:
    """Four turns; with `token_input`, each assistant turn goes back as its sampled ids."""
    conversation: list[content_pb2.Message] = []
    records = []
    for turn in range(4):
        if turn in USER_TURNS:
            conversation.append(message("user", USER_TURNS[turn]))
        request = request_pb2.Request(model="reference", tools=tools(list(TOOLS.values())))
        request.conversation.messages.extend(conversation)
        request.sampling.seed = turn
        request.sampling.max_output_tokens = 24
        request.sampling.stop.append(" ")  # a text turn ends on a stop string: sampled, trimmed, with no logprob
        request.logprob_options.require_token_ids = True
        response = model.run(request)
        response.ClearField("timing")
        record = record_of(model, request, response, key=f"turn-{turn}")
        record.provenance.ClearField("start_time")
        record.provenance.ClearField("end_time")
        records.append(record)
        choice = response.choices[0]
        said = content_pb2.Message()
        said.CopyFrom(choice.message)
        if token_input:
            said.token_ids.extend(choice.sampled_tokens.token_ids)
        conversation.append(said)
        for part in choice.message.parts:
            if part.HasField("tool_call"):
                call = part.tool_call
                conversation.append(tool_result(call, TOOLS[call.name](**json.loads(call.arguments_json))))
    return records


def expected(responses: list[response_pb2.Response]) -> dict[str, object]:
    """What the rule makes of the responses: the trajectory, or the error that refuses it."""
    try:
        got = trajectory(responses)
    except TrajectoryDriftError as drift:
        return {
            "error": {"turn": drift.turn, "position": drift.position, "expected": drift.expected, "found": drift.found}
        }
    return {
        "trajectory": {
            "tokens": got.tokens.tolist(),
            "loss_mask": got.loss_mask.astype(int).tolist(),
            "logprobs": [None if math.isnan(x) else x for x in got.logprobs.tolist()],
            "turns": [
                {"prompt_start": start, "sampled_start": sampled, "end": end}
                for start, sampled, end in got.boundaries.tolist()
            ],
        }
    }


def _write(path: Path, fmt: str, records: list[record_pb2.Record]) -> None:
    path.unlink(missing_ok=True)
    with RecordWriter.create(path, fmt=fmt, run_metadata={"vector": path.name}) as writer:
        for record in records:
            writer.append(record)


def main() -> int:
    files = []
    with connect("reference") as model:
        for name, fmt, token_input in (
            ("rollout.jsonl", JSONL, True),
            ("rollout.binpb", BINARY, True),
            ("drift.jsonl", JSONL, False),
        ):
            records = rollout(model, token_input=token_input)
            _write(HERE / name, fmt, records)
            files.append({"path": name, "format": fmt} | expected([r.response for r in records]))
    manifest = {
        "description": (
            "Record files of a four-turn tool-calling rollout of the reference model (write_vectors.py) and the "
            "trajectory each gives by the rule in the comment of Response.prompt_token_ids, or the drift error "
            "that refuses it. Every SDK (Python, TypeScript, Go, Rust) reads each file and must find exactly this."
        ),
        "rules": {
            "trajectory": "tokens, loss_mask (1 where sampled), logprobs (null where none: compare as float32) "
            "and each turn's prompt_start, sampled_start and end",
            "error": "the turn refused for drift, the first position where its prompt differs from the sequence, "
            "and the ids expected and found there (found is -1 where the prompt ends first)",
        },
        "files": files,
    }
    text = json.dumps(manifest, indent=2)
    # One line per array of numbers: a position per line would make the file thousands of lines long.
    text = re.sub(r"\[\s+([-\w.,\s]*?)\s+\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]", text)
    (HERE / "expected.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
