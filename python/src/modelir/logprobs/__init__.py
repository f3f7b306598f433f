"""Columnar logprobs: building and combining `TokenLogprobs` (`build`) and the optional native fast path (`native`)."""
