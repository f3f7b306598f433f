"""The live suites' shared fixtures: recording their exchanges when MODELIR_RECORD is set (`recorder.py`)."""

from __future__ import annotations

import pytest

from tests.engines import recorder


@pytest.fixture(scope="session", autouse=True)
def _recording():
    if not recorder.ENABLED:
        yield
        return
    recorder.install()
    yield
    recorder.RECORDER.close()


@pytest.fixture(autouse=True)
def _recorded_test(request):
    if recorder.ENABLED:
        recorder.RECORDER.begin(request.module.__name__.rsplit(".", 1)[-1], request.node.name)
    yield
