"""The typed stop of a choice (`Choice.stop`, `ChoiceFinish.stop`): the stop string or stop token id that ended it."""

from __future__ import annotations

from modelir.v1 import response_pb2, stream_pb2

Stop = str | int | None
_Holder = response_pb2.Choice | stream_pb2.ChoiceFinish


def set_stop(target: _Holder, stop: Stop) -> None:
    """Set what ended generation: a non-empty string is a stop string, an int a stop token id, None or "" nothing.

    Setting a oneof member to its default still selects it, so the empty case must never be assigned."""
    if isinstance(stop, bool):  # a JSON true/false is neither a string nor a token id
        return
    if isinstance(stop, int):
        target.stop_token_id = stop
    elif stop:
        target.stop_sequence = str(stop)


def stop_of(holder: _Holder) -> Stop:
    """The stop that ended generation, or None."""
    kind = holder.WhichOneof("stop")
    return None if kind is None else getattr(holder, kind)


def copy_stop(source: _Holder, target: _Holder) -> None:
    set_stop(target, stop_of(source))
