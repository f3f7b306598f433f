"""Reading answers: a `Response` as Python values (`view`), a kept raw exchange (`raw`), a label distribution
(`classification`), a multi-turn rollout as the token arrays a trainer consumes (`trajectory`)."""
