"""Reading answers: a `Response` as Python values (`view`), a kept raw exchange (`raw`), a label distribution
(`classification`)."""
