"""Timing helpers shared by the bench cases."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """The median wall time of `repeat` calls of `fn`."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired(subject: Callable[[], object], baseline: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """Time `subject` and `baseline` alternately, `repeat` pairs.

    Returns (median subject seconds, median baseline seconds, median of the per-pair ratios). Interleaving puts
    both sides of a ratio under the same machine conditions: on a shared VM the speed drifts by 20% over
    seconds, which timing one side after the other turns into ratio error.
    """
    subject_times, baseline_times, ratios = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        baseline()
        middle = time.perf_counter()
        subject()
        end = time.perf_counter()
        baseline_times.append(middle - start)
        subject_times.append(end - middle)
        ratios.append((end - middle) / (middle - start))
    return statistics.median(subject_times), statistics.median(baseline_times), statistics.median(ratios)


def chained(
    produce: Callable[[], object], consume: Callable[[object], object], repeat: int
) -> tuple[float, float, float]:
    """Time `produce()` and then `consume()` on what it produced, `repeat` times.

    Returns (median consume seconds, median produce seconds, median of the per-run ratios). `consume` works on
    a fresh result each time, as it does in real use (a lift builds from the dicts `orjson.loads` just made),
    rather than on one warm object that stays in the CPU caches across repetitions.
    """
    consume_times, produce_times, ratios = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        product = produce()
        middle = time.perf_counter()
        consume(product)
        end = time.perf_counter()
        produce_times.append(middle - start)
        consume_times.append(end - middle)
        ratios.append((end - middle) / (middle - start))
    return statistics.median(consume_times), statistics.median(produce_times), statistics.median(ratios)
