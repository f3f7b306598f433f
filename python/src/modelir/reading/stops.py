"""The typed stop of a choice (`Choice.stop`, `ChoiceFinish.stop`): the stop string or stop token id that ended it."""

from __future__ import annotations

from modelir.v1 import request_pb2, response_pb2, stream_pb2

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


def requested(request: request_pb2.Request, stop: Stop) -> bool:
    """Whether a stop the engine names is one the request asked for: a listed stop string or stop token id."""
    if isinstance(stop, bool) or stop is None:
        return False
    if isinstance(stop, int):
        return stop in request.sampling.stop_token_ids
    return stop in request.sampling.stop


def settle_natural_end(request: request_pb2.Request, holder: _Holder) -> None:
    """A natural end told apart from a requested stop: engines name the end token they stopped on whether the request
    listed it or the model's generation config did (vLLM's `stop_reason` is `<|im_end|>`'s id on a chat model's
    natural end), so a named stop the request did not ask for is the end of the sequence (`STOP`, no stop)."""
    if holder.finish_reason != response_pb2.FINISH_REASON_STOP_SEQUENCE:
        return
    stop = stop_of(holder)
    if stop is not None and not requested(request, stop):
        holder.finish_reason = response_pb2.FINISH_REASON_STOP
        holder.ClearField("stop")
