"""Evaluation frameworks running on any modelir model: one module per framework, each an optional extra.

`modelir.integrations.lm_eval` (extra `lm-eval`) is lm-evaluation-harness's `modelir` model;
`modelir.integrations.inspect_ai` (extra `inspect`) is Inspect AI's `modelir` provider. Nothing here is imported by
the core SDK or the server: each module imports its framework when it is itself imported.
"""
