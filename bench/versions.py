"""The gateway of another modelir tree beside this one's and the floor gateway, all serving at once and loaded in
interleaved rounds: before/after figures measured side by side instead of in runs hours apart.

    git archive e453924 python/src | tar -x -C /tmp/before
    cd bench && ../.venv/bin/python versions.py /tmp/before/python/src --rounds 5

The other tree runs on this virtual environment (its `python/src` first on `PYTHONPATH`), so it must not need
dependencies this one lacks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

from gateway import _config, _process, _rounds, _setup, _spread

HERE = Path(__file__).resolve().parent


def run(other_src: str, rounds: int = 5, seconds: float = 3.0, in_flight: int = 64) -> list[tuple[str, str, str]]:
    python, request = sys.executable, _setup()
    helper = [python, str(HERE / "processes.py")]
    with (
        _process([*helper, "upstream"], r"READY (\d+)") as (upstream_port, _),
        contextlib.ExitStack() as stack,
    ):
        base_url = f"http://127.0.0.1:{upstream_port}/v1"
        config = stack.enter_context(_config(base_url))
        serve = [python, "-m", "modelir.cli", "serve", "--config", config, "--port", "0"]
        other = {**os.environ, "PYTHONPATH": str(Path(other_src).resolve())}
        ready = r"on 127\.0\.0\.1:(\d+)"
        servers = {
            "other": stack.enter_context(_process(serve, ready, env=other)),
            "this": stack.enter_context(_process(serve, ready)),
            "floor": stack.enter_context(_process([*helper, "floor", f"{base_url}/chat/completions"], r"READY (\d+)")),
        }
        targets = {label: (f"127.0.0.1:{port}", pid) for label, (port, pid) in servers.items()}
        rates, cpus = _rounds(targets, request, in_flight, seconds, rounds)
    median = statistics.median
    this_other = [t / o for t, o in zip(cpus["this"], cpus["other"], strict=True)]
    rows = [
        (
            f"gateway server CPU per request, this tree vs {other_src}, {in_flight} in flight",
            f"{median(cpus['this']):.0f} vs {median(cpus['other']):.0f} us",
            f"{median(this_other):.2f}x ({_spread(this_other)} over {rounds} rounds)",
        )
    ]
    for label in ("other", "this"):
        ratio = [c / f for c, f in zip(cpus[label], cpus["floor"], strict=True)]
        rows.append(
            (
                f"gateway server CPU per request / the floor's, {label} tree",
                f"{median(cpus[label]):.0f} vs {median(cpus['floor']):.0f} us; {median(rates[label]):,.0f} req/s",
                f"{median(ratio):.2f}x ({_spread(ratio)})",
            )
        )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other_src", help="the other tree's python/src")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for row in run(args.other_src, args.rounds):
        print(" | ".join(row))
