"""The three-label classifier with the official openai SDK: first-token top logprobs, mapped to labels by hand.

Labels must have distinct first tokens; nothing says when they do not, or how much probability the top 20 covered.
"""

import math

from openai import OpenAI

LABELS = ["positive", "negative", "neutral"]
REVIEWS = ["A wonderful, moving film!", "Two hours I will never get back.", "It was a film, with actors in it"]

client = OpenAI()
for review in REVIEWS:
    response = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": f"Answer with one word: {', '.join(LABELS)}."},
            {"role": "user", "content": f"Sentiment of the review: {review}"},
        ],
        max_tokens=1,
        logprobs=True,
        top_logprobs=20,
    )
    masses = dict.fromkeys(LABELS, 0.0)
    for alternative in response.choices[0].logprobs.content[0].top_logprobs:
        for label in LABELS:
            if alternative.token.strip() and label.startswith(alternative.token.strip().lower()):
                masses[label] += math.exp(alternative.logprob)
    total = sum(masses.values()) or 1.0
    probabilities = {label: mass / total for label, mass in masses.items()}
    best = max(probabilities, key=probabilities.__getitem__)
    shown = "  ".join(f"{label} {p:.2f}" for label, p in probabilities.items())
    print(f"{best:9} {shown}  {review}")
client.close()
