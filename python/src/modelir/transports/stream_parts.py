"""The part bookkeeping every stream lifter shares: which native piece is which IR part, per choice.

A native stream names its pieces its own way (chat tool-call `index`, Responses `output_index`/`content_index`,
Anthropic block `index`, Gemini's runs of parts). `StreamParts` gives each (choice, key) the next part index of its
choice the first time it is seen, and keeps the text of text parts so that the soft-error policy can check the
constraint at the end.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from modelir.v1 import stream_pb2


class StreamParts:
    def __init__(self) -> None:
        self._parts: dict[int, dict[Hashable, int]] = {}  # choice -> key -> part index
        self._labels: dict[int, list[str]] = {}  # choice -> the label of each part, in order
        self._texts: dict[int, list[str]] = {}

    def open(self, choice: int, key: Hashable, label: str = "") -> tuple[int, bool]:
        """The part index of (choice, key), and whether this call opened it."""
        parts = self._parts.setdefault(choice, {})
        index = parts.get(key)
        if index is not None:
            return index, False
        index = parts[key] = len(parts)
        self._labels.setdefault(choice, []).append(label)
        return index, True

    def index(self, choice: int, key: Hashable, label: str = "") -> int:
        return self.open(choice, key, label)[0]

    def labels(self, choice: int) -> list[str]:
        """The labels of the parts opened so far for `choice`, in part order (the choice counts as seen)."""
        self._parts.setdefault(choice, {})
        return self._labels.setdefault(choice, [])

    def choices(self) -> list[int]:
        return sorted(self._parts)

    def delta(self, choice: int, key: Hashable, label: str = "", **fields: Any) -> stream_pb2.StreamEvent:
        """A delta event for the part (choice, key), opening it when new; a `text` field is kept for `texts`."""
        if "text" in fields:
            self._texts.setdefault(choice, []).append(fields["text"])
        index = self.index(choice, key, label)
        return stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(choice_index=choice, part_index=index, **fields))

    def text_delta(self, choice: int, text: str) -> stream_pb2.StreamEvent:
        """`delta(choice, "text", text=text)`, the commonest delta, built directly."""
        self._texts.setdefault(choice, []).append(text)
        parts = self._parts.get(choice)
        index = parts.get("text") if parts is not None else None
        if index is None:
            index = self.index(choice, "text")
        event = stream_pb2.StreamEvent()  # set member by member: upb's keyword constructor costs twice as much
        delta = event.delta
        delta.choice_index = choice
        delta.part_index = index
        delta.text = text
        return event

    def add_text(self, choice: int, text: str) -> None:
        """Record text that reached a text part without `delta` (a lifter that builds its own deltas)."""
        self._texts.setdefault(choice, []).append(text)

    def texts(self) -> dict[int, str]:
        """Each choice's text so far, for the constraint check."""
        return {choice: "".join(pieces) for choice, pieces in self._texts.items()}
