"""`modelir conformance`: replay the golden wire fixtures and print what passed."""

from __future__ import annotations

import argparse
from pathlib import Path


def _conformance(args: argparse.Namespace) -> int:
    import orjson

    from modelir.cli._common import UserError
    from modelir.conformance import runner as conformance

    fixtures = Path(args.fixtures) if args.fixtures else conformance.DEFAULT_FIXTURES
    if not fixtures.is_dir():
        if args.fixtures:
            raise UserError(f"--fixtures {args.fixtures}: not a folder of fixtures")
        # The fixtures are the repository's language-neutral data (every language's runner reads them), not part
        # of the Python package: an installed modelir has no copy.
        raise UserError(
            "the golden wire fixtures are not installed with the package: they are the repository's "
            "conformance/fixtures folder; clone the repository and give it: modelir conformance --fixtures "
            "PATH/conformance/fixtures"
        )
    report = conformance.run(fixtures, args.transport)
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        for name, result in report["transports"].items():
            cases = result["cases"]
            passed = sum(c["passed"] for c in cases)
            print(f"{name}: {passed}/{len(cases)} cases passed" + ("" if result["passed"] else "  FAILED"))
            for case in cases:
                for problem in case["problems"]:
                    print(f"  {case['case']}: {problem}")
            for problem in result["coverage"]:
                print(f"  coverage: {problem}")
    return 0 if report["passed"] else 1


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conformance = commands.add_parser("conformance", help="replay the golden wire fixtures")
    conformance.add_argument("--transport", help="only this transport")
    conformance.add_argument(
        "--fixtures",
        help="the fixtures folder: the repository's conformance/fixtures (the default when modelir runs from a clone; "
        "an installed package ships none)",
    )
    conformance.add_argument("--json", action="store_true", help="print per-transport, per-case results as JSON")
    conformance.set_defaults(func=_conformance)
