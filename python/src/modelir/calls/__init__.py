"""The calls a `Model` makes besides generation, one module each: the tokenizer's (`tokenizer`) and embeddings
(`embedding`)."""
