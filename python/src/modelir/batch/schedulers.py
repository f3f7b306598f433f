"""The scheduler a `modelir run` command line asks for: the local pool, or Ray (`--ray [ADDRESS]`)."""

from __future__ import annotations

import argparse

from modelir.batch.local import LocalScheduler
from modelir.batch.model_spec import ModelSpec
from modelir.batch.run import Scheduler


def scheduler_from_args(args: argparse.Namespace) -> Scheduler:
    if not getattr(args, "ray", None):
        return LocalScheduler(args.concurrency)
    from modelir.batch.ray_scheduler import RayScheduler

    if getattr(args, "target", None):
        spec = ModelSpec(model=args.model, target=args.target)
    elif getattr(args, "config", None):
        spec = ModelSpec.from_config_file(args.config, args.model)
    else:
        spec = ModelSpec(model=args.model)
    return RayScheduler(
        spec,
        address=None if args.ray == "local" else args.ray,
        workers=args.ray_workers,
        concurrency=args.concurrency,
    )
