"""`modelir validate`, `generate` and `classify`: check one request against a model, run one prompt and print the
answer, or pick one of a few labels with a probability for each."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from modelir.cli._common import UserError, add_where, capability_names, input_file, open_model

if TYPE_CHECKING:  # imported by the commands, after the arguments are parsed
    from modelir.interface import ModelInterface
    from modelir.v1 import request_pb2, response_pb2


def _read_request(path: str) -> request_pb2.Request:
    from google.protobuf import json_format

    from modelir.v1 import request_pb2

    data = input_file(path, "--request").read_bytes()
    try:
        return json_format.Parse(data, request_pb2.Request())
    except json_format.ParseError as exc:
        raise UserError(f"--request {path}: not a Request in proto-JSON: {exc}") from None


@contextlib.asynccontextmanager
async def _opened(args: argparse.Namespace) -> AsyncIterator[ModelInterface]:
    """The model `--model` names, closed (its HTTP sessions, or its channel) when the command is done: asyncio
    would otherwise report an "Unclosed client session" at exit."""
    model, loaded = await open_model(args)
    try:
        yield model
    finally:
        if loaded is not None:
            await loaded.aclose()
        elif (closing := getattr(model, "aclose", None)) is not None:  # a RemoteModel's channel
            await closing()


async def _validate(args: argparse.Namespace) -> int:
    request = _read_request(args.request)
    async with _opened(args) as model:
        return await _judge(model, request)


async def _judge(model: ModelInterface, request: request_pb2.Request) -> int:
    from modelir import errors

    verdict = await model.avalidate(request)
    for violation in verdict.field_violations:
        print(f"invalid: {violation.field}: {violation.description}")
    if verdict.field_violations:
        return 1
    print("needs: " + ", ".join(capability_names()[c] for c in verdict.required))
    if verdict.accepted:
        print(f"accepted by {model.name}")
        return 0
    print(errors.describe_unsupported(verdict.unsupported))
    return 1


async def _as_chat(args: argparse.Namespace, model: ModelInterface) -> bool:
    """Whether the prompt goes as a user message: asked for (`--chat`, `--system`), or the only form the model takes
    (its manifest has chat but no completion). One line on stderr says which form went and why."""
    from modelir.v1 import capabilities_pb2

    if args.chat or getattr(args, "system", None) is not None:
        chat, why = True, "--system" if getattr(args, "system", None) is not None else "--chat"
    elif args.completion:
        chat, why = False, "--completion"
    else:
        have = set((await model.acapabilities()).capabilities)
        completion = capabilities_pb2.CAPABILITY_COMPLETION in have
        chat = not completion and capabilities_pb2.CAPABILITY_CHAT in have
        why = f"{model.name} takes no raw prompts" if chat else f"{model.name} takes raw prompts"
    form = "chat: the prompt went as a user message" if chat else "completion: the prompt went as a raw prompt"
    print(f"[form] {form} ({why})", file=sys.stderr)
    return chat


def _request(args: argparse.Namespace, model: str, chat: bool) -> request_pb2.Request:
    from modelir.writing.builder import build_request

    if chat:
        return build_request(
            model,
            messages=[("user", args.prompt)],
            system=args.system,
            max_output_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed,
            top_logprobs=args.top_logprobs,
            logprobs=bool(args.top_logprobs),
        )
    return build_request(
        model,
        prompt=args.prompt,
        max_output_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        top_logprobs=args.top_logprobs,
        logprobs=bool(args.top_logprobs),
    )


def _print_logprobs(response: response_pb2.Response) -> None:
    """One line a sampled token: its logprob and the top alternatives."""
    from modelir.reading.view import view

    arrays = view(response).logprobs if response.choices else None
    if arrays is None:
        return
    tops = arrays.top_tokens
    width = max([len("token")] + [len(repr(t)) for t in arrays.tokens])
    print(f"{'token'.ljust(width)}  logprob  top alternatives")
    for i, token in enumerate(arrays.tokens):
        alternatives = ", ".join(f"{t!r} {float(v):.3f}" for t, v in zip(tops[i], arrays.top_logprobs[i], strict=False))
        print(f"{repr(token).ljust(width)}  {float(arrays.logprobs[i]):7.3f}  {alternatives}")


async def _generate(args: argparse.Namespace) -> int:
    async with _opened(args) as model:
        return await _generated(args, model)


async def _generated(args: argparse.Namespace, model: ModelInterface) -> int:
    from google.protobuf import json_format

    from modelir.reading.view import view

    request = _request(args, model.name, await _as_chat(args, model))
    if args.stream:
        from modelir.streams.fold import StreamAccumulator

        accumulator = StreamAccumulator()
        async for event in model.astream(request):
            accumulator.add(event)
            if not args.json and event.WhichOneof("event") == "delta" and event.delta.WhichOneof("content") == "text":
                print(event.delta.text, end="", flush=True)
        if not args.json:
            print()
        response = accumulator.response()
    else:
        response = await model.arun(request)
        if not args.json:
            for text in view(response).texts:
                print(text)
    if args.json:
        print(json_format.MessageToJson(response))
        return 0
    if args.top_logprobs:
        _print_logprobs(response)
    usage = response.usage
    print(
        f"[usage] input={usage.input_token_count} output={usage.output_token_count}"
        + (f" error={response.errors[0].message}" if bool(response.errors) else ""),
        file=sys.stderr,
    )
    return 0


async def _classify(args: argparse.Namespace) -> int:
    import orjson

    from modelir.reading.classification import aclassify

    labels = [label.strip() for label in args.labels.split(",")]
    if len(labels) < 2 or len(set(labels)) != len(labels) or not all(labels):
        raise UserError(f"--labels {args.labels}: give at least two distinct, non-empty labels, e.g. yes,no")
    async with _opened(args) as model:
        chat = await _as_chat(args, model)
        result = await aclassify(model, [("user", args.prompt)] if chat else args.prompt, labels)
    if args.json:
        fields = {"label": result.label, "probabilities": result.probabilities, "method": result.method}
        print(orjson.dumps({**fields, "coverage": result.coverage}).decode())
        return 0
    shown = "  ".join(f"{label} {p:.3f}" for label, p in result.probabilities.items())
    print(f"{result.label}  ({shown})")
    print(f"[classify] method={result.method} coverage={result.coverage:.3f}", file=sys.stderr)
    return 0


def _add_form(sub: argparse.ArgumentParser) -> None:
    form = sub.add_mutually_exclusive_group()
    form.add_argument("--chat", action="store_true", help="send the prompt as a user message")
    form.add_argument("--completion", action="store_true", help="send the prompt as a raw prompt")


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = commands.add_parser("validate", help="check a request (proto-JSON file) against a model")
    add_where(validate)
    validate.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    validate.add_argument("--request", required=True, help="a file holding one Request in proto-JSON")
    validate.set_defaults(afunc=_validate)

    generate = commands.add_parser(
        "generate",
        help="run one prompt and print the text and usage",
        description="Run one prompt. Without --chat or --completion it goes in the form the model takes: a raw "
        "prompt, or a user message when the model has chat but no completion; stderr says which.",
    )
    add_where(generate)
    generate.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    generate.add_argument("--stream", action="store_true", help="print text as it arrives")
    _add_form(generate)
    generate.add_argument("--system", help="a system prompt (sends the prompt as a user message)")
    generate.add_argument(
        "--max-tokens", type=int, default=256, help="the most tokens to generate (default: %(default)s)"
    )
    generate.add_argument("--temperature", type=float, help="the sampling temperature (0: greedy)")
    generate.add_argument("--seed", type=int, help="the sampling seed, for repeatable answers")
    generate.add_argument(
        "--top-logprobs",
        type=int,
        default=0,
        metavar="K",
        help="print each token's logprob and its top-K alternatives (default: %(default)s: none)",
    )
    generate.add_argument("--json", action="store_true", help="print the whole Response as proto-JSON instead")
    generate.add_argument("prompt", help="the prompt text")
    generate.set_defaults(afunc=_generate)

    classify = commands.add_parser(
        "classify",
        help="pick one of a few labels, with a probability for each",
        description="Classify a text: the most probable label and every label's probability, by the method the "
        "model allows (choice logprobs, top-k logprobs or input scoring; stderr says which). The form of the "
        "prompt is chosen as for generate.",
    )
    add_where(classify)
    classify.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    classify.add_argument("--labels", required=True, metavar="A,B,...", help="the labels, separated by commas")
    _add_form(classify)
    classify.add_argument("--json", action="store_true", help="print label, probabilities, method and coverage as JSON")
    classify.add_argument("prompt", help="the text to classify, with the question (e.g. 'Sentiment: great film!')")
    classify.set_defaults(afunc=_classify, system=None)
