"""`python -m tests.fuzz`: a longer fuzz run than `make test`'s, printing its seed and every escape site."""

from __future__ import annotations

import argparse
import random
import sys

from tests.fuzz.drive import run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--seconds", type=float, default=300.0, help="how long to fuzz (default 300)")
    parser.add_argument("--seed", type=int, default=None, help="the seed (default: a random one, printed)")
    parser.add_argument("--transport", default=None, help="only this transport's fixtures")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    report = run(seed, seconds=args.seconds, transport=args.transport)
    print(report.summary())
    return 1 if report.escapes or report.wrong_shape_successes else 0


if __name__ == "__main__":
    sys.exit(main())
