"""The fleet's pieces that need no server: limiter configuration, the policies for an unreachable Redis,
replica targets, token settling from usage, and the batch scheduler contract. (With real Redis, replicas and
Ray: tests/scale, `make test-scale`.)"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from typing import ClassVar

import pytest
from modelir import Limiter, Model, ReferenceModel, build_request, errors
from modelir.batch import LocalScheduler, read_inputs, run_batch
from modelir.config import ConfigError, build_config
from modelir.limiter import BaseLimiter
from modelir.limiter.redis_limiter import LimiterUnavailableError, RedisLimiter
from modelir.records.files import read_records
from modelir.remote import RemoteModel, channel_target

from tests.concurrency import peak_concurrency


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def _config(extra: dict | None = None, limits: dict | None = None):
    data = {"models": {"m": {"transport": "reference", **({"limits": limits} if limits is not None else {})}}}
    data.update(extra or {})
    return build_config(data, source="fleet.yaml", environ={"REDIS_URL": "redis://127.0.0.1:1/0"})


def test_the_in_memory_limiter_stays_the_default():
    assert type(_config(limits={"requests_per_minute": 60}).models["m"].limiter) is Limiter


def test_a_redis_url_makes_every_limiter_shared_and_named_by_its_place():
    config = _config(
        {
            "limiter_backend": {"url_env": "REDIS_URL", "on_unavailable": "local", "key_prefix": "prod"},
            "limiters": {"key": {"tokens_per_minute": 1000}},
        },
        limits={"max_concurrency": 4},
    )
    limiter = config.models["m"].limiter
    assert isinstance(limiter, RedisLimiter)
    assert (limiter.name, limiter.max_concurrency, limiter.on_unavailable) == ("models.m.limits", 4, "local")
    assert limiter._keys == ("{prod:models.m.limits}:state", "{prod:models.m.limits}:leases")
    assert "127.0.0.1:1" in repr(limiter)


@pytest.mark.parametrize(
    ("backend", "problem"),
    [
        ("http://x", "limiter_backend.url: expected `memory` or a redis://"),
        ({"url": "redis://x", "on_unavailable": "panic"}, "limiter_backend.on_unavailable: expected one of"),
        ({"url": "redis://x", "colour": 1}, "limiter_backend.colour: unknown field"),
        ({"url_env": "NOT_SET"}, "limiter_backend.url_env: the environment variable NOT_SET is not set"),
        ({"url": "redis://x", "lease_seconds": 0}, "limiter_backend.lease_seconds: expected a positive number"),
        ({}, "give exactly one of `url` and `url_env`"),
    ],
)
def test_limiter_backend_errors_name_the_field(backend, problem):
    with pytest.raises(ConfigError, match=problem.replace("`", ".").replace("(", r"\(")):
        _config({"limiter_backend": backend})


def test_limits_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"models\.m\.limits\.max_concurrency: expected a whole number"):
        _config(limits={"max_concurrency": 2.5})
    with pytest.raises(ConfigError, match=r"models\.m\.limits\.burst: unknown limit"):
        _config(limits={"burst": 2})


async def test_fail_policy_raises_a_typed_error_naming_the_limiter():
    limiter = RedisLimiter(f"redis://:secret@127.0.0.1:{_closed_port()}/0", "gpt", on_unavailable="fail")
    with pytest.raises(LimiterUnavailableError, match=re.escape("'gpt' at redis://127.0.0.1")) as caught:
        async with limiter.acquire():
            pass
    assert "secret" not in str(caught.value)
    assert caught.value.reason == errors.ProviderUnavailableError.reason and caught.value.retryable
    await limiter.aclose()


async def test_local_policy_runs_on_local_limits_with_one_warning(caplog):
    caplog.set_level(logging.WARNING, logger="modelir.limiter")
    limiter = RedisLimiter(f"redis://127.0.0.1:{_closed_port()}/0", "gpt", max_concurrency=2, on_unavailable="local")
    assert await peak_concurrency([limiter], 12) == 2
    warnings = [r for r in caplog.records if "unreachable" in r.message]
    assert len(warnings) == 1 and "using this replica's own limits" in warnings[0].message
    await limiter.aclose()


async def test_wait_policy_waits_instead_of_failing():
    limiter = RedisLimiter(f"redis://127.0.0.1:{_closed_port()}/0", "gpt", on_unavailable="wait")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            async with limiter.acquire():
                pass
    await limiter.aclose()


def test_replica_targets():
    assert channel_target("127.0.0.1:5000") == "127.0.0.1:5000"
    assert channel_target("127.0.0.1:1, 127.0.0.2:1") == "ipv4:127.0.0.1:1,127.0.0.2:1"
    assert channel_target(["[::1]:1", "[::1]:2"]) == "ipv6:[::1]:1,[::1]:2"
    assert channel_target("dns:///modelir.internal:50051") == "dns:///modelir.internal:50051"
    with pytest.raises(ValueError, match="give one dns:///name:port"):
        channel_target("a.example:1,b.example:1")
    with pytest.raises(ValueError, match="mix IPv4 and IPv6"):
        RemoteModel("127.0.0.1:1,[::1]:1", "m")


class _Recording(Limiter):
    def __init__(self) -> None:
        super().__init__(tokens_per_minute=600)  # refills 10 a second: slow enough to see
        self.settled: list[tuple[int, int]] = []

    def settle_tokens(self, estimated: int, actual: int) -> None:
        self.settled.append((estimated, actual))
        super().settle_tokens(estimated, actual)


async def test_the_token_estimate_is_settled_from_the_usage_unary_and_streamed():
    limiter = _Recording()
    model = Model(ReferenceModel(), name="reference", limiter=limiter)
    request = build_request("reference", prompt="hello there", max_output_tokens=8)
    response = await model.arun(request)
    used = response.usage.input_token_count + response.usage.output_token_count
    assert len(limiter.settled) == 1 and limiter.settled[0][1] == used and limiter.settled[0][0] != used
    # The budget spent is the usage, not the estimate (give or take the refill during the call).
    assert limiter._tokens is not None and 600 - used <= limiter._tokens.level < 600 - used + 2
    async for _ in model.astream(request):
        pass
    assert len(limiter.settled) == 2 and limiter.settled[1][1] == used
    assert isinstance(limiter, BaseLimiter)


class _Forgetful:
    """A scheduler that drops a key: the run must notice, not write a file with a key missing silently."""

    async def run(self, model, manifest, todo, previous_attempts):
        async for record in LocalScheduler(2).run(model, manifest, todo[1:], previous_attempts):
            yield record


async def test_a_scheduler_that_loses_a_key_fails_the_run(tmp_path, reference):
    inputs = [(f"k{i}", build_request("reference", prompt=f"p{i}", max_output_tokens=2)) for i in range(5)]
    with pytest.raises(RuntimeError, match=re.escape("no record for 1 keys, e.g. 'k0'")):
        await run_batch(reference, inputs, tmp_path / "out.jsonl", scheduler=_Forgetful())
    assert sorted(r.key for r in read_records(tmp_path / "out.jsonl")) == ["k1", "k2", "k3", "k4"]
    # and a resume finishes exactly the missing key
    summary = await run_batch(reference, inputs, tmp_path / "out.jsonl", resume=True)
    assert (summary.skipped, summary.ok) == (4, 1)
    assert read_inputs  # the public batch API keeps its names


class _Counting(Model):
    calls = 0

    async def arun(self, request, *, deadline=None):
        type(self).calls += 1
        return await super().arun(request, deadline=deadline)


async def test_round_robin_skips_a_replica_whose_health_check_says_not_serving():
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from modelir.server.app import SERVICE_NAME, add_model_service, build_server
    from modelir.server.servicer import ModelServicer

    healthy, healthy_port = await build_server({"reference": Model(ReferenceModel(), name="reference")}, "127.0.0.1:0")
    await healthy.start()
    sick = grpc.aio.server()
    add_model_service(ModelServicer({"reference": _Counting(ReferenceModel(), name="reference")}), sick)
    sick_health = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(sick_health, sick)
    await sick_health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
    sick_port = sick.add_insecure_port("127.0.0.1:0")
    await sick.start()
    model = RemoteModel([f"127.0.0.1:{sick_port}", f"127.0.0.1:{healthy_port}"], "reference")
    request = build_request("reference", prompt="hi", max_output_tokens=2)
    for _ in range(20):
        await model.arun(request)
    assert _Counting.calls == 0, "a replica that reports NOT_SERVING must get no calls"
    single = RemoteModel(f"dns:///localhost:{healthy_port}", "reference")  # a DNS name works as a target too
    assert (await single.arun(request)).choices
    await model.aclose()
    await single.aclose()
    await sick.stop(None)
    await healthy.stop(None)


async def test_calls_and_streams_cut_off_before_an_answer_are_sent_again_but_modelir_errors_are_not():
    import grpc
    from modelir.server.app import add_model_service
    from modelir.server.servicer import ModelServicer

    class GoesAwayFirst(ModelServicer):
        """Fails the first call of each kind as a replica that went away does: UNAVAILABLE, no modelir error."""

        cut: ClassVar[set[str]] = set()

        async def Generate(self, request, context):
            if "unary" not in self.cut:
                self.cut.add("unary")
                await context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
            return await super().Generate(request, context)

        async def StreamGenerate(self, request, context):
            if "stream" not in self.cut:
                self.cut.add("stream")
                await context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
            async for message in super().StreamGenerate(request, context):
                yield message

    server = grpc.aio.server()
    add_model_service(GoesAwayFirst({"reference": Model(ReferenceModel(), name="reference")}), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    model = RemoteModel(f"127.0.0.1:{port}", "reference")
    try:
        request = build_request("reference", prompt="hi", max_output_tokens=3)
        assert (await model.arun(request)).choices
        events = [event async for event in model.astream(request)]
        assert events and events[-1].WhichOneof("event") == "end"
        assert model.failovers == 2
        unsupported = build_request("", prompt="hi", max_output_tokens=3)
        unsupported.constraint.regex = "a+"  # the reference model has no regex constraint
        with pytest.raises(errors.UnsupportedCapabilityError):  # answered by the server: never sent again
            await model.arun(unsupported)
        assert model.failovers == 2
    finally:
        await model.aclose()
        await server.stop(None)
