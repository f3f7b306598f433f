from __future__ import annotations

import pytest
from modelir import Model, ReferenceModel


@pytest.fixture
def reference() -> Model:
    return Model(ReferenceModel(), name="reference")
