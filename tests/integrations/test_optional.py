"""The integrations are optional extras: importing the SDK, the server or the CLI never imports lm-eval or Inspect."""

from __future__ import annotations

import subprocess
import sys


def test_the_core_never_imports_the_evaluation_frameworks():
    probe = (
        "import sys, modelir, modelir.server, modelir.cli, modelir.integrations; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'lm_eval', 'inspect_ai', 'datasets', 'torch'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
