"""The conformance runner: replays golden wire fixtures (language-neutral JSON) through a transport.

The format is documented in `conformance/README.md`. Each fixture is one exchange: an IR request (for a token-in
conversation, the rounds of engine calls that build its prompt first); the native HTTP request the transport must
send; the native answer (a unary body or the raw stream events); and the IR response,
or the typed error, that must come out. A negative fixture holds a request the manifest must reject, with the
capabilities that must be named. The runner also checks coverage: every capability a transport claims is proved
by at least one positive fixture, and every capability it does not claim is named by a negative one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from modelir import errors
from modelir.pipeline import embedding as embed_checks
from modelir.pipeline.capabilities import tokenize_missing
from modelir.pipeline.prepare import Pipeline, Prepared
from modelir.registry import build_transport, registry
from modelir.streams.fold import accumulate
from modelir.transports import token_prompt
from modelir.transports.base import HttpResponse, HttpTransport, RawEvent, Transport, guarded_error
from modelir.v1 import capabilities_pb2, embedding_pb2, request_pb2, response_pb2, service_pb2

DEFAULT_FIXTURES = Path(__file__).resolve().parents[4] / "conformance" / "fixtures"


@dataclass(slots=True)
class CaseResult:
    transport: str
    case: str
    passed: bool
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "passed": self.passed, "problems": self.problems}


def _capability(name: str) -> int:
    return capabilities_pb2.Capability.Value("CAPABILITY_" + name)


def _json_diff(expected: Any, actual: Any) -> str:
    a = orjson.dumps(expected, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()
    b = orjson.dumps(actual, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()
    return "\n".join(difflib.unified_diff(a, b, "expected", "actual", lineterm="", n=2))


def _message_json(message: Message) -> Any:
    return json_format.MessageToDict(message, preserving_proto_field_name=False)


def _clean_for_compare(response: response_pb2.Response) -> response_pb2.Response:
    copy = response_pb2.Response()
    copy.CopyFrom(response)
    copy.ClearField("timing")
    return copy


def _body_bytes(spec: dict[str, Any]) -> bytes:
    if "body_text" in spec:
        return str(spec["body_text"]).encode()
    if "body" in spec:
        return orjson.dumps(spec["body"])
    return b""


def run_case(transport_name: str, path: Path) -> CaseResult:
    case = path.stem
    result = CaseResult(transport_name, case, True)
    problems = result.problems
    try:
        fixture = orjson.loads(path.read_bytes())
        transport = build_transport(transport_name, fixture.get("transport_options", {}), path.parent)
        if not isinstance(transport, HttpTransport):
            raise TypeError(f"fixtures replay wire exchanges; {transport_name} is not an HTTP transport")
        if fixture.get("operation") == "tokenize" and "expected_rejection" not in fixture:
            _check_tokenize(fixture, transport, problems)
            result.passed = not problems
            return result
        streaming = fixture.get("mode") == "stream"
        if fixture.get("operation") == "tokenize":
            tokenize = json_format.Parse(
                orjson.dumps(fixture.get("tokenize_request", {})), service_pb2.TokenizeRequest()
            )
            missing = sorted(errors.capability_name(c) for c in tokenize_missing(tokenize, transport.manifest()))
            if missing != sorted(fixture["expected_rejection"].get("missing", [])):
                problems.append(f"tokenize: missing capabilities {missing}, expected {fixture['expected_rejection']}")
            result.passed = not problems
            return result
        if fixture.get("operation") == "embed":  # IR 1.1
            _check_embed(fixture, transport, problems)
            result.passed = not problems
            return result
        request = json_format.Parse(orjson.dumps(fixture["request"]), request_pb2.Request())
        if "expected_rejection" in fixture:
            _check_rejection(fixture["expected_rejection"], transport, request, streaming, problems)
        else:
            _check_exchange(fixture, transport, request, streaming, problems)
    except Exception as exc:  # a broken fixture or a crashing transport is a failed case, not a crashed run
        problems.append(f"{type(exc).__name__}: {exc}")
    result.passed = not problems
    return result


def _check_rejection(
    spec: dict[str, Any], transport: Transport, request: request_pb2.Request, streaming: bool, problems: list[str]
) -> None:
    try:
        Pipeline(transport).check(request, streaming=streaming)
    except errors.ModelError as exc:
        _compare_rejection(spec, exc, problems)
    else:
        problems.append("the request was accepted; the manifest must reject it")


def _compare_rejection(spec: dict[str, Any], exc: errors.ModelError, problems: list[str]) -> None:
    if isinstance(exc, errors.InvalidRequestError):
        fields = sorted(v.field for v in exc.violations)
        if fields != sorted(spec.get("fields", [])):
            problems.append(f"invalid fields {fields}, expected {sorted(spec.get('fields', []))}")
        return
    if not isinstance(exc, errors.UnsupportedCapabilityError):
        raise exc
    gaps = exc.unsupported
    missing = sorted(errors.capability_name(c) for c in gaps.missing)
    if missing != sorted(spec.get("missing", [])):
        problems.append(f"missing capabilities {missing}, expected {sorted(spec.get('missing', []))}")
    limits = sorted(v.limit for v in gaps.limit_violations)
    if limits != sorted(spec.get("limits", [])):
        problems.append(f"limit violations {limits}, expected {sorted(spec.get('limits', []))}")
    for fragment in spec.get("reasons_contain", []):
        if not any(fragment in reason for reason in gaps.reasons):
            problems.append(f"no reason mentions {fragment!r}: {list(gaps.reasons)}")


def _check_exchange(
    fixture: dict[str, Any],
    transport: HttpTransport,
    request: request_pb2.Request,
    streaming: bool,
    problems: list[str],
) -> None:
    try:
        prepared = Pipeline(transport).prepare(request, streaming=streaming)
    except errors.UnsupportedCapabilityError as exc:
        gaps = errors.describe_unsupported(exc.unsupported)
        problems.append(f"the manifest rejects a request this fixture expects to run: {gaps}")
        return
    if "token_prompt_rounds" in fixture:  # a token-in conversation: its renders first (`token_prompt`)
        resolved = _token_prompt(fixture, transport, prepared, streaming, problems)
        if resolved is None:
            return
        prepared = resolved
    request, lowered = prepared.request, prepared.native
    if lowered is None:  # the transport runs it as a token-id prompt (`runs_as_token_prompt`): renders first
        problems.append("the request runs as a token-id prompt, so the fixture needs its `token_prompt_rounds`")
        return
    expected_http = fixture["expected_http_request"]
    if lowered.method != expected_http["method"] or lowered.path != expected_http["path"]:
        problems.append(
            f"sent {lowered.method} {lowered.path}, expected {expected_http['method']} {expected_http['path']}"
        )
    sent_body = orjson.loads(lowered.body) if lowered.body else None
    if sent_body != expected_http.get("body"):
        problems.append("lowered body differs:\n" + _json_diff(expected_http.get("body"), sent_body))

    answer = fixture["http_response"]
    status = answer.get("status", 200)
    headers = {k.lower(): v for k, v in answer.get("headers", {}).items()}
    if status >= 400:
        error = guarded_error(transport, HttpResponse(status, headers, _body_bytes(answer)))
        _check_error(fixture.get("expected_error"), error, problems)
        return
    try:
        if streaming:
            lifter = transport.stream_lifter_accounted(request)
            events = []
            for raw in fixture["stream_events"]:
                events.extend(lifter.feed(RawEvent(raw.get("event", ""), raw["data"].encode())))
            events.extend(lifter.close(interrupted=fixture.get("stream_end") == "interrupted"))
            actual = accumulate(events)
        else:
            actual = transport.lift_accounted(request, HttpResponse(status, headers, _body_bytes(answer)))
    except errors.ModelError as exc:
        _check_error(fixture.get("expected_error"), exc, problems)
        return
    if "expected_error" in fixture:
        problems.append(f"expected the error {fixture['expected_error']}, but the lift succeeded")
        return
    expected = json_format.Parse(orjson.dumps(fixture["expected_response"]), response_pb2.Response())
    if _clean_for_compare(actual) != _clean_for_compare(expected):
        problems.append(
            "lifted response differs:\n"
            + _json_diff(_message_json(_clean_for_compare(expected)), _message_json(_clean_for_compare(actual)))
        )


def _token_prompt(
    fixture: dict[str, Any], transport: HttpTransport, prepared: Prepared, streaming: bool, problems: list[str]
) -> Prepared | None:
    """The engine calls that build a token-in conversation's prompt, round by round as the fixture has them, then
    the request that runs; None (with the problems noted) when they differ or the assembly refuses as expected."""
    plan = token_prompt.plan(prepared.request)
    steps = transport.token_prompt_steps(plan)
    try:
        natives = next(steps)
        for number, spec in enumerate(fixture["token_prompt_rounds"]):
            sent = [{"method": n.method, "path": n.path, "body": orjson.loads(n.body)} for n in natives]
            if sent != (expected := spec["expected_http_requests"]):
                problems.append(f"round {number}: requests differ:\n" + _json_diff(expected, sent))
                return None
            natives = steps.send([_answer(a) for a in spec["http_responses"]])
        problems.append("the transport asks for more rounds of calls than the fixture has")
        return None
    except StopIteration as done:
        rendered, sentinels = done.value
    try:
        prompt = token_prompt.assemble(prepared.request, plan, rendered, sentinels)
    except errors.ModelError as exc:
        _check_error(fixture.get("expected_error"), exc, problems)
        return None
    request = token_prompt.token_request(prepared.request, prompt)
    return Prepared(request, prepared.warnings, transport.lower(request, stream=streaming))


def request_that_runs(fixture: dict[str, Any]) -> request_pb2.Request:
    """A positive fixture's IR request as the transport lowers and lifts it: for a conversation run as a token
    prompt, the token-id request its rounds built (its prompt is the one `expected_http_request` sends, as the
    completion route's `prompt` on llama.cpp and vLLM, as `input_ids` on sglang's /generate)."""
    request = json_format.Parse(orjson.dumps(fixture["request"]), request_pb2.Request())
    if "token_prompt_rounds" not in fixture:
        return request
    body = fixture["expected_http_request"]["body"]
    return token_prompt.token_request(request, body["input_ids"] if "input_ids" in body else body["prompt"])


def _answer(spec: dict[str, Any]) -> HttpResponse:
    return HttpResponse(
        spec.get("status", 200), {k.lower(): v for k, v in spec.get("headers", {}).items()}, _body_bytes(spec)
    )


def _check_embed(fixture: dict[str, Any], transport: HttpTransport, problems: list[str]) -> None:
    """An `Embed` exchange (IR 1.1): the same checks as a unary one, with `EmbedRequest` and `EmbedResponse`."""
    request = json_format.Parse(orjson.dumps(fixture["request"]), embedding_pb2.EmbedRequest())
    try:
        request = embed_checks.check(request, transport, transport.manifest())
    except (errors.InvalidRequestError, errors.UnsupportedCapabilityError) as exc:
        if "expected_rejection" in fixture:
            _compare_rejection(fixture["expected_rejection"], exc, problems)
        else:
            problems.append(f"the checks reject a request this fixture expects to run: {exc}")
        return
    if "expected_rejection" in fixture:
        problems.append("the embedding request was accepted; the checks must reject it")
        return
    lowered = transport.lower_embed(request)
    expected_http = fixture["expected_http_request"]
    if lowered.method != expected_http["method"] or lowered.path != expected_http["path"]:
        problems.append(
            f"sent {lowered.method} {lowered.path}, expected {expected_http['method']} {expected_http['path']}"
        )
    sent_body = orjson.loads(lowered.body) if lowered.body else None
    if sent_body != expected_http.get("body"):
        problems.append("lowered body differs:\n" + _json_diff(expected_http.get("body"), sent_body))
    answer = fixture["http_response"]
    response = HttpResponse(
        answer.get("status", 200), {k.lower(): v for k, v in answer.get("headers", {}).items()}, _body_bytes(answer)
    )
    try:
        if response.status >= 400:
            raise guarded_error(transport, response)
        actual = transport.lift_embed_accounted(request, response)
    except errors.ModelError as exc:
        _check_error(fixture.get("expected_error"), exc, problems)
        return
    if "expected_error" in fixture:
        problems.append(f"expected the error {fixture['expected_error']}, but the lift succeeded")
        return
    expected = json_format.Parse(orjson.dumps(fixture["expected_response"]), embedding_pb2.EmbedResponse())
    if actual != expected:
        problems.append("lifted embed response differs:\n" + _json_diff(_message_json(expected), _message_json(actual)))


def _check_tokenize(fixture: dict[str, Any], transport: HttpTransport, problems: list[str]) -> None:
    request = json_format.Parse(orjson.dumps(fixture["tokenize_request"]), service_pb2.TokenizeRequest())
    natives = transport.lower_tokenize(request)
    sent = [{"method": n.method, "path": n.path, "body": orjson.loads(n.body) if n.body else None} for n in natives]
    if sent != fixture["expected_http_requests"]:
        problems.append("lowered tokenize requests differ:\n" + _json_diff(fixture["expected_http_requests"], sent))
    answers = [
        HttpResponse(a.get("status", 200), {k.lower(): v for k, v in a.get("headers", {}).items()}, _body_bytes(a))
        for a in fixture["http_responses"]
    ]
    actual = transport.lift_tokenize(request, answers)
    expected = json_format.Parse(orjson.dumps(fixture["expected_tokenize_response"]), service_pb2.TokenizeResponse())
    if actual != expected:
        problems.append(
            "lifted tokenize response differs:\n" + _json_diff(_message_json(expected), _message_json(actual))
        )


def _check_error(spec: dict[str, Any] | None, exc: errors.ModelError, problems: list[str]) -> None:
    if spec is None:
        problems.append(f"unexpected error {type(exc).__name__}: {exc}")
        return
    reason = errors.mapping_for(exc.reason).info_reason
    if reason != spec["reason"]:
        problems.append(f"error reason {reason}, expected {spec['reason']} ({exc})")
    if "http_status" in spec and exc.http_status != spec["http_status"]:
        problems.append(f"error http_status {exc.http_status}, expected {spec['http_status']}")
    if "provider_code" in spec and exc.provider_code != spec["provider_code"]:
        problems.append(f"error provider_code {exc.provider_code!r}, expected {spec['provider_code']!r}")
    if "retry_after" in spec and exc.retry_after != spec["retry_after"]:
        problems.append(f"error retry_after {exc.retry_after}, expected {spec['retry_after']}")
    if "message_contains" in spec and spec["message_contains"] not in exc.message:
        problems.append(f"error message {exc.message!r} lacks {spec['message_contains']!r}")


def coverage_problems(transport_name: str, fixtures: list[Path]) -> list[str]:
    """Claimed capabilities without a positive fixture; unclaimed ones no negative fixture names.

    A transport's manifest can depend on its options (sglang claims CHAT with a chat template): a positive
    fixture proves what the transport built with its `transport_options` claims, every capability some fixture's
    options claim needs a positive fixture, and every capability the transport without options lacks needs a
    negative one."""
    unconfigured = set(build_transport(transport_name).manifest().capabilities)
    claimed = set(unconfigured)
    proved: set[int] = set()
    rejected: set[int] = set()
    problems = []
    for path in fixtures:
        fixture = orjson.loads(path.read_bytes())
        if "expected_rejection" in fixture:
            rejected.update(_capability(n) for n in fixture["expected_rejection"].get("missing", []))
            continue
        options = fixture.get("transport_options", {})
        own = set(build_transport(transport_name, options, path.parent).manifest().capabilities) if options else None
        claims = unconfigured if own is None else own
        claimed |= claims
        proves = {_capability(n) for n in fixture.get("proves", [])}
        proved |= proves & claims  # a capability the fixture's transport does not claim proves nothing
        problems += [
            f"{path.stem} proves {errors.capability_name(c)}, which the manifest (with its options) does not claim"
            for c in sorted(proves - claims)
        ]
    every = {v for v in capabilities_pb2.Capability.values() if v}
    problems[:0] = [
        f"claimed capability {errors.capability_name(c)} has no positive fixture" for c in sorted(claimed - proved)
    ]
    problems += [
        f"unclaimed capability {errors.capability_name(c)} has no negative fixture"
        for c in sorted(every - unconfigured - rejected)
    ]
    return problems


def run(fixtures_dir: Path = DEFAULT_FIXTURES, transport: str | None = None) -> dict[str, Any]:
    """Run every fixture (of one transport, or all). The report says per transport and per case what failed."""
    report: dict[str, Any] = {"passed": True, "transports": {}}
    names = [transport] if transport else sorted(p.name for p in fixtures_dir.iterdir() if p.is_dir())
    for name in names:
        if name not in registry():
            report["transports"][name] = {"passed": False, "coverage": [f"no transport named {name!r}"], "cases": []}
            report["passed"] = False
            continue
        paths = sorted((fixtures_dir / name).glob("*.json"))
        cases = [run_case(name, p) for p in paths]
        coverage = coverage_problems(name, paths)
        passed = bool(cases) and all(c.passed for c in cases) and not coverage
        report["transports"][name] = {
            "passed": passed,
            "coverage": coverage,
            "cases": [c.to_json() for c in cases],
        }
        report["passed"] &= passed
    return report
