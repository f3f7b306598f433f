"""The stream accumulator's public import path (`modelir.accumulate`); it lives in `modelir.streams`."""

from modelir.streams import StreamAccumulator, accumulate

__all__ = ["StreamAccumulator", "accumulate"]
