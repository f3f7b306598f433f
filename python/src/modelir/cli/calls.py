"""`modelir validate` and `generate`: check one request against a model, or run one prompt and print the answer."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator

from google.protobuf import json_format

from modelir import errors
from modelir.cli._common import CAPABILITY_NAMES, UserError, add_where, input_file, open_model
from modelir.interface import ModelInterface
from modelir.reading.view import view
from modelir.v1 import request_pb2, response_pb2
from modelir.writing.builder import build_request


def _read_request(path: str) -> request_pb2.Request:
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
    verdict = await model.avalidate(request)
    for violation in verdict.field_violations:
        print(f"invalid: {violation.field}: {violation.description}")
    if verdict.field_violations:
        return 1
    print("needs: " + ", ".join(CAPABILITY_NAMES[c] for c in verdict.required))
    if verdict.accepted:
        print(f"accepted by {model.name}")
        return 0
    print(errors.describe_unsupported(verdict.unsupported))
    return 1


def _request(args: argparse.Namespace, model: str) -> request_pb2.Request:
    chat = args.chat or args.system is not None  # a system prompt only goes with messages
    source = {"messages": [("user", args.prompt)]} if chat else {"prompt": args.prompt}
    return build_request(
        model,
        **source,
        system=args.system,
        max_output_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        top_logprobs=args.top_logprobs,
        logprobs=bool(args.top_logprobs),
    )


def _print_logprobs(response: response_pb2.Response) -> None:
    """One line a sampled token: its logprob and the top alternatives."""
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
    request = _request(args, model.name)
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


def add(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser("validate", help="check a request (proto-JSON file) against a model")
    add_where(validate)
    validate.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    validate.add_argument("--request", required=True, help="a file holding one Request in proto-JSON")
    validate.set_defaults(afunc=_validate)

    generate = commands.add_parser("generate", help="run one prompt and print the text and usage")
    add_where(generate)
    generate.add_argument("--model", required=True, help="the model's name (in the configuration, or on --target)")
    generate.add_argument("--stream", action="store_true", help="print text as it arrives")
    generate.add_argument("--chat", action="store_true", help="send the prompt as a user message")
    generate.add_argument("--system", help="a system prompt (sends the prompt as a user message)")
    generate.add_argument("--max-tokens", type=int, default=None, help="the most tokens to generate")
    generate.add_argument("--temperature", type=float, default=None, help="the sampling temperature (0: greedy)")
    generate.add_argument("--seed", type=int, default=None, help="the sampling seed, for repeatable answers")
    generate.add_argument(
        "--top-logprobs", type=int, default=0, metavar="K", help="print each token's logprob and its top-K alternatives"
    )
    generate.add_argument("--json", action="store_true", help="print the whole Response as proto-JSON instead")
    generate.add_argument("prompt", help="the prompt text")
    generate.set_defaults(afunc=_generate)
