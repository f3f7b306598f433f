"""modelir: a versioned, provider-neutral IR for language models."""
