"""An attribute set made once and measured with many times (the metric attribute sets of a model's calls).

Plain OpenTelemetry API, no SDK: `modelir.telemetry.calls` makes these whether or not the SDK is installed.
"""

from __future__ import annotations

from typing import Any

# An `AggregatingHistogram` (`modelir.telemetry.meter`) holds this many values of one attribute set before it
# aggregates them (and all at every collection); a caller appending to its lists itself folds them at this length.
FOLD_AT = 256


class AttributeSet(dict[str, Any]):
    """A dict that carries its own hashable key (`frozenset` of its items), which `modelir.telemetry.meter` uses
    instead of making one per measurement; any other instrument (the SDK's) reads it as the plain mapping it is.
    It cannot be changed, since its key would then lie."""

    __slots__ = ("key",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key = frozenset(self.items())

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("an AttributeSet cannot be changed: make a new one")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _refuse  # type: ignore[assignment]
