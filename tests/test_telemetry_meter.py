"""modelir's aggregating meter (`modelir.telemetry.meter`) exports what the SDK's instruments would: the same
measurements through both give the same points; real calls give the same metrics, attribute sets and counts; and
its own behaviour (delta temporality, the cardinality limit, the export thread, a failing exporter, shutdown)."""

from __future__ import annotations

import random
import threading

import pytest
from modelir import Model, ReferenceModel, build_request, errors, telemetry
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.telemetry import _runtime, setup
from modelir.telemetry.attribute_set import AttributeSet
from modelir.telemetry.meter import CARDINALITY_LIMIT, AggregatingMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
)
from opentelemetry.sdk.resources import Resource


def _points(data, *, any_port: bool = False) -> dict[tuple[str, frozenset], dict]:
    """Every exported point by (metric, attribute set), without its timestamps, plus the metric's own fields;
    `any_port` leaves `server.port` (a test server's, which changes from run to run) out of the sets."""
    found = {}
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    fields = {
                        k: (list(v) if isinstance(v, tuple | list) else v)
                        for k, v in vars(point).items()
                        if k not in ("start_time_unix_nano", "time_unix_nano", "attributes", "exemplars")
                    }
                    fields["metric"] = (
                        metric.description,
                        metric.unit,
                        type(metric.data).__name__,
                        metric.data.aggregation_temporality,
                        getattr(metric.data, "is_monotonic", None),
                    )
                    attributes = {k: v for k, v in point.attributes.items() if not (any_port and k == "server.port")}
                    found[(metric.name, frozenset(attributes.items()))] = fields
    return found


def _both(temporality=AggregationTemporality.CUMULATIVE):
    """modelir's instruments made on the SDK (with an in-memory reader) and on an aggregating meter."""
    reader = InMemoryMetricReader(
        preferred_temporality={kind: temporality for kind in _instrument_classes()},
    )
    sdk = MeterProvider(metric_readers=[reader])
    ours = AggregatingMeter(Resource.create(), temporality=temporality)
    return (
        (_runtime.Instruments.create(sdk.get_meter("modelir")), reader.get_metrics_data),
        (_runtime.Instruments.create(ours.get_meter("modelir")), ours.collect),
    )


def _instrument_classes():
    from opentelemetry.sdk.metrics import Counter, Histogram

    return (Counter, Histogram)


def _measure(instruments, seed: int) -> None:
    """A seeded mix of every instrument, attribute sets in varying key order, values on and between bounds."""
    rng = random.Random(seed)
    models = [{"gen_ai.request.model": m, "gen_ai.operation.name": "chat"} for m in ("a", "b", "c")]
    for _ in range(500):
        attributes = dict(rng.sample(list(rng.choice(models).items()), 2))  # the same set, keys in either order
        if rng.random() < 0.3:
            attributes["error.type"] = rng.choice(["timeout", "MALFORMED_RESPONSE"])
        if rng.random() < 0.5:  # as modelir measures: a set made once, carrying its key
            attributes = AttributeSet(attributes)
        instruments.token_usage.record(rng.choice([0, 1, 4, 5, 16, 17, 70_000, 9 * 10**7]), attributes)
        instruments.duration.record(rng.choice([0.0, 0.01, 0.02, 0.5, 3.7, 81.92, 100.0]), attributes)
        instruments.time_per_output_chunk.record(rng.random() / 10, attributes)
        instruments.retries.add(rng.randint(0, 3), attributes)
        instruments.soft_errors.add(1, {**attributes, "modelir.error.reason": rng.choice("xyz")})
    instruments.duration.record(-1.0, {"negative": "ignored"})  # the SDK drops it (and warns)
    instruments.duration.record(-2.0, AttributeSet({"negative": "ignored"}))
    for amount in (-1.0, 3.0, -0.5):  # with others of the same set: those others kept
        instruments.duration.record(amount, AttributeSet({"some": "negative"}))
    instruments.retries.add(-1, {"negative": "ignored"})


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_the_same_measurements_give_the_same_points_as_the_sdk(temporality):
    (sdk, sdk_collect), (ours, our_collect) = _both(temporality)
    for collection in range(2):  # the second collection shows cumulative vs delta
        seed = 1000 + collection
        _measure(sdk, seed)
        _measure(ours, seed)
        expected, got = _points(sdk_collect()), _points(our_collect())
        assert expected and set(got) == set(expected)
        for key, fields in expected.items():
            exact = {**fields, **({"sum": pytest.approx(fields["sum"])} if "sum" in fields else {})}
            assert got[key] == exact, key  # float sums may differ in the last bit (addition order)


def test_past_the_cardinality_limit_measurements_go_to_one_overflow_set():
    (sdk, sdk_collect), (ours, our_collect) = _both()
    for instruments in (sdk, ours):
        for i in range(CARDINALITY_LIMIT + 25):
            instruments.retries.add(1, {"id": i})
    expected, got = _points(sdk_collect()), _points(our_collect())
    assert got == expected
    overflow = ("modelir.client.retries", frozenset({("otel.metric.overflow", True)}))
    assert got[overflow]["value"] == 25 and len(got) == CARDINALITY_LIMIT + 1


def test_values_appended_to_a_histograms_own_list_count_as_recorded_ones():
    """What a caller appends to `values_of(attributes)` (folding at `FOLD_AT`) gives the points `record` gives; past
    the cardinality limit there is no list to append to (`record` is the way)."""
    from modelir.telemetry.attribute_set import FOLD_AT, AttributeSet

    (sdk, sdk_collect), (ours, our_collect) = _both()
    kept = AttributeSet({"gen_ai.operation.name": "chat"})
    values = ours.duration.values_of(kept)
    assert values is not None and ours.duration.values_of(kept) is values  # the one list of that set
    for i in range(FOLD_AT * 2 + 7):
        sdk.duration.record(i / 100, kept)
        values.append(i / 100)
        if len(values) >= FOLD_AT:
            ours.duration.fold(values, kept)
    assert len(values) == 7  # folded twice on the way
    assert _points(our_collect()) == _points(sdk_collect())
    for i in range(CARDINALITY_LIMIT):
        ours.duration.record(1.0, AttributeSet({"id": i}))
    assert ours.duration.values_of(AttributeSet({"id": "one too many"})) is None


def test_measurements_from_many_threads_while_collecting_are_all_counted_once():
    """A histogram's measurements are appended without a lock and aggregated later: none may be lost or counted
    twice, whichever thread aggregates them and while collections take them away (delta)."""
    meter = AggregatingMeter(Resource.create(), temporality=AggregationTemporality.DELTA)
    histogram = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[1.0, 2.0])
    sets = [AttributeSet({"set": n}) for n in range(3)]
    threads, per_thread, collected = 4, 20_000, []
    done = threading.Event()

    def measure(seed: int) -> None:
        for i in range(per_thread):
            histogram.record((i + seed) % 3, sets[i % 3])

    def collect_until_done() -> None:
        while not done.is_set():
            collected.append(meter.collect())

    collector = threading.Thread(target=collect_until_done)
    collector.start()
    workers = [threading.Thread(target=measure, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    done.set()
    collector.join()
    collected.append(meter.collect())
    points = [
        point
        for data in collected
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        for point in metric.data.data_points
    ]
    assert len(collected) > 2  # collections ran while measuring
    assert sum(p.count for p in points) == threads * per_thread
    by_bucket = [sum(p.bucket_counts[b] for p in points) for b in range(3)]  # (-inf, 1], (1, 2], (2, inf)
    values = [(i + seed) % 3 for seed in range(threads) for i in range(per_thread)]
    expected = [values.count(0) + values.count(1), values.count(2), 0]
    assert by_bucket == expected and sum(p.sum for p in points) == sum(values)


async def _served_calls() -> None:
    """Real calls through the gRPC server: unary, a stream, a soft error, a rejection, a request error."""
    server, port = await build_server({"reference": Model(ReferenceModel(), name="reference")}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "reference")
    try:
        await remote.achat([("user", "hi")], max_output_tokens=8)
        [_ async for _ in remote.astream(build_request("reference", prompt="x", max_output_tokens=12))]
        await remote.agenerate("x", max_output_tokens=2, stop=["never"])
        with pytest.raises(errors.ModelError):
            await remote.arun(build_request("reference", prompt="x", max_output_tokens=10**7))
    finally:
        await remote.aclose()
        await server.stop(None)


async def test_real_calls_give_the_same_metrics_attribute_sets_and_counts():
    runs = []
    for make in ("sdk", "ours"):
        if make == "sdk":
            reader = InMemoryMetricReader()
            telemetry.install(meter_provider=MeterProvider(metric_readers=[reader]))
            collect = reader.get_metrics_data
        else:
            meter = AggregatingMeter()
            telemetry.install(meter_provider=meter)
            collect = meter.collect
        try:
            await _served_calls()
        finally:
            telemetry.install()
        runs.append(_points(collect(), any_port=True))
    expected, got = runs
    assert len(expected) > 8 and set(got) == set(expected)
    for key, fields in expected.items():
        assert got[key]["metric"] == fields["metric"]
        assert got[key].get("count", got[key].get("value")) == fields.get("count", fields.get("value")), key
        if key[0] == "gen_ai.client.token.usage":  # not a timing: the same values exactly
            assert got[key] == fields


class _Recording(MetricExporter):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.exported: list = []
        self.fail = fail
        self.shut = False
        self.event = threading.Event()

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        self.exported.append(metrics_data)
        self.event.set()
        if self.fail:
            raise ConnectionError("the collector is down")
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self.shut = True


def test_the_meter_exports_every_interval_survives_a_failing_exporter_and_flushes_at_shutdown(caplog):
    failing, working = _Recording(fail=True), _Recording()
    meter = AggregatingMeter(exporters=[failing, working], export_interval_millis=20)
    instruments = _runtime.Instruments.create(meter.get_meter("modelir"))
    instruments.retries.add(2, {"a": "b"})
    assert working.event.wait(5) and failing.event.wait(5)
    assert "the collector is down" in caplog.text or "failed" in caplog.text
    instruments.retries.add(3, {"a": "b"})
    meter.shutdown()
    assert failing.shut and working.shut
    last = _points(working.exported[-1])
    assert last[("modelir.client.retries", frozenset({("a", "b")}))]["value"] == 5  # cumulative, the last flush
    meter.shutdown()  # twice is harmless


def test_nothing_measured_exports_nothing():
    exporter = _Recording()
    meter = AggregatingMeter(exporters=[exporter], export_interval_millis=10**9)
    meter.shutdown()
    assert exporter.exported == []


def test_the_server_setup_measures_with_the_aggregating_meter_unless_exemplars_are_asked_for(monkeypatch):
    monkeypatch.delenv("OTEL_METRICS_EXEMPLAR_FILTER", raising=False)
    environ = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "console"}
    installed = setup.configure_from_env(environ)
    try:
        assert isinstance(installed.meter_provider, AggregatingMeter)
        assert _runtime.hooks() is not None
        assert _runtime.instruments().duration.__class__.__module__ == "modelir.telemetry.meter"
    finally:
        installed.shutdown()
    assert _runtime._own_meter is None  # shutting down gives the meter up
    with_exemplars = setup.build_from_env({**environ, "OTEL_METRICS_EXEMPLAR_FILTER": "trace_based"})
    assert isinstance(with_exemplars.meter_provider, MeterProvider)
    with_exemplars.shutdown()


def test_the_temporality_follows_the_exporters_preference_variable():
    from modelir.telemetry.meter import temporality_from_env

    assert temporality_from_env({}) is AggregationTemporality.CUMULATIVE
    for value in ("delta", "LowMemory"):
        assert temporality_from_env({"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": value}) is (
            AggregationTemporality.DELTA
        )


def test_an_attribute_set_carries_its_key_cannot_be_changed_and_reads_as_a_mapping_everywhere():
    from modelir.telemetry.attribute_set import AttributeSet

    made = AttributeSet({"gen_ai.request.model": "a"}, **{"gen_ai.token.type": "input"})
    assert made.key == frozenset(made.items()) and made == {"gen_ai.request.model": "a", "gen_ai.token.type": "input"}
    for change in (
        lambda: made.__setitem__("x", 1),
        lambda: made.update(x=1),
        lambda: made.pop("gen_ai.request.model"),
    ):
        with pytest.raises(TypeError, match="cannot be changed"):
            change()
    (sdk, sdk_collect), (ours, our_collect) = _both()
    for instruments in (sdk, ours):
        instruments.token_usage.record(3, made)
        instruments.token_usage.record(4, dict(made))  # the same set, as a plain dict
    expected, got = _points(sdk_collect()), _points(our_collect())
    assert got == expected and [p["count"] for p in got.values()] == [2]
