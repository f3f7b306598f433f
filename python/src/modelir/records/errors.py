"""The errors and warnings of record files."""

from __future__ import annotations


class RecordFileError(Exception):
    """A record file that cannot be read or resumed (wrong version, no header, not a record file)."""


class OtherSeriesError(RecordFileError):
    """A record file of another IR major version than this SDK writes: not resumable here (and not readable)."""


class NewerMinorVersionWarning(UserWarning):
    """A record file from a newer minor IR version: readable (fields this SDK does not know are not shown)."""
