"""A three-label classifier with a probability for every label (`classify` picks the method the model allows).

Runs on the reference model: the labels it prefers mean nothing, the probabilities are its real ones.
"""

import modelir

LABELS = ["positive", "negative", "neutral"]
REVIEWS = ["A wonderful, moving film!", "Two hours I will never get back.", "It was a film, with actors in it"]

with modelir.connect("reference") as model:
    for review in REVIEWS:
        result = modelir.classify(model, f"Sentiment of the review: {review}", LABELS)
        shown = "  ".join(f"{label} {p:.2f}" for label, p in result.probabilities.items())
        print(f"{result.label:9} {shown}  ({result.method})  {review}")
