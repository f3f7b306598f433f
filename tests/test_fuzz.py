"""Fuzzed native answers never escape untyped: every lift, stream lifter, error mapping and tokenize lift.

A bounded run over every fixture of every transport (`tests/fuzz/`); `make fuzz` runs longer. The seed is printed,
so a failure reproduces with `python -m tests.fuzz --seed N`. Set MODELIR_FUZZ_SEED to pin it here.
"""

from __future__ import annotations

import os
import random

from tests.fuzz.drive import run

SECONDS = float(os.environ.get("MODELIR_FUZZ_SECONDS", "12"))


def test_fuzzed_answers_end_typed():
    seed = int(os.environ.get("MODELIR_FUZZ_SEED", random.randrange(2**32)))
    report = run(seed, seconds=SECONDS)
    print(report.summary())
    assert report.inputs > 1000, report.summary()
    assert not report.escapes, report.summary()
