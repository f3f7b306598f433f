"""`modelir models`, `transports` and `check`: what the models are, and whether one has what a task needs."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from modelir.cli._common import UserError, add_where, capability_names, config, open_model, tls_of

if TYPE_CHECKING:  # imported by the command, after the arguments are parsed
    from modelir.pipeline.needs import Needs


async def _models(args: argparse.Namespace) -> int:
    import orjson
    from google.protobuf import json_format

    tls = tls_of(args)
    if args.target:
        from modelir.remote import list_models

        manifests = dict(await list_models(args.target, token=os.environ.get("MODELIR_TOKEN"), **tls))
    else:
        manifests = {name: model.capabilities for name, model in sorted(config(args).models.items())}
    if args.json:
        dicts = {name: json_format.MessageToDict(m) for name, m in manifests.items()}
        print(orjson.dumps(dicts, option=orjson.OPT_INDENT_2).decode())
        return 0
    rows = [("model", "transport", "capabilities")] + [
        (name, m.transport, ", ".join(capability_names()[c] for c in m.capabilities)) for name, m in manifests.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for name, transport, capabilities in rows:
        print(f"{name.ljust(widths[0])}  {transport.ljust(widths[1])}  {capabilities}")
    return 0


def _transports(args: argparse.Namespace) -> int:
    """Every transport and the options a configuration entry may give it."""
    from modelir.registry import registry

    for name, entry in registry().items():
        print(name)
        for option in entry.options.values():
            print(f"  {option.name}: {option.describe()}")
    return 0


def _declared_needs(args: argparse.Namespace) -> Needs:
    from modelir.pipeline.needs import needs
    from modelir.v1 import capabilities_pb2
    from modelir.writing.names import enum_name

    names = [n.strip() for n in args.needs.split(",") if n.strip()]
    if not names:
        raise UserError("--needs: give at least one capability, e.g. --needs chat,input_scoring")
    known = sorted(enum_name(capabilities_pb2.Capability, c) for c in capability_names() if c)
    unknown = [n for n in names if n.lower() not in known]
    if unknown:
        listed = ", ".join(repr(n) for n in unknown)
        raise UserError(f"--needs: unknown capability {listed} (known: {', '.join(known)})")
    return needs(*names, top_logprobs=args.top_logprobs, max_output_tokens=args.max_output_tokens)


async def _check(args: argparse.Namespace) -> int:
    """Exit 0 when the model has every capability and limit; otherwise one error naming everything it lacks."""
    declared = _declared_needs(args)  # before connecting: a typo is the user's, whatever the model
    model, loaded = await open_model(args)
    try:
        await declared.acheck(model)
    finally:
        if loaded is not None:
            await loaded.aclose()
    print(f"{args.model} has everything the task needs: {', '.join(declared.names)}")
    return 0


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = commands.add_parser("models", help="list models and their capabilities")
    add_where(models)
    models.add_argument("--json", action="store_true", help="print the manifests as JSON")
    models.set_defaults(afunc=_models)

    transports = commands.add_parser("transports", help="list the transports and their configuration options")
    transports.set_defaults(func=_transports)

    check = commands.add_parser("check", help="does a model have every capability a task needs? (names every gap)")
    add_where(check)
    check.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    check.add_argument(
        "--needs",
        required=True,
        metavar="CAP,CAP,...",
        help="the capabilities, by short name as `modelir models` prints them (any case): chat,input_scoring,...",
    )
    check.add_argument("--top-logprobs", type=int, default=0, metavar="K", help="the task asks for top-K logprobs")
    check.add_argument("--max-output-tokens", type=int, default=0, metavar="N", help="the task generates up to N")
    check.set_defaults(afunc=_check)
