"""The unfold of a response into stream events, at its old import path; it lives in `modelir.streams`."""

from modelir.streams import events_from_response

__all__ = ["events_from_response"]
