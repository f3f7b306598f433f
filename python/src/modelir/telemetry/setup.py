"""Install the OpenTelemetry SDK and exporters from the standard `OTEL_*` environment variables (`modelir serve`).

Nothing is exported unless asked for: telemetry starts only when `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`
or an `OTEL_EXPORTER_OTLP_*ENDPOINT` is set (the SDK's own default exporter, `otlp`, would otherwise send to
localhost:4317 from every server), and never when `OTEL_SDK_DISABLED=true`. Exporters: `otlp` (protocol from
`OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL`: `grpc`, or `http/protobuf`, the specification's default),
`console`, `none`; several may be listed, comma-separated. The exporters, the batch span processor
(`OTEL_BSP_*`), the metric export interval and timeout (`OTEL_METRIC_EXPORT_INTERVAL`, `_TIMEOUT`), the
temporality (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`), the sampler (`OTEL_TRACES_SAMPLER`) and the
resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) read their own variables. `modelir serve`'s default
sampler, when `OTEL_TRACES_SAMPLER` is unset, is parent-based with 10% of new traces kept (`SERVER_SAMPLER_RATIO`;
`OTEL_TRACES_SAMPLER_ARG` sets another ratio).
Spans are the SDK's: its `TracerProvider` (span limits from `OTEL_SPAN_ATTRIBUTE_*` / `OTEL_ATTRIBUTE_*`, the id
generator from `OTEL_PYTHON_ID_GENERATOR`) with a `BatchSpanProcessor` per exporter. Set an attribute value length
limit when content capture is on: a collector refuses an export request over its message limit (4 MiB by default),
and the whole batch with it. `MODELIR_OTLP_FAST_SPANS=true` opts in to `modelir.telemetry.otlp`'s cheaper OTLP/gRPC
span encoder (about a third of the stock encoder's CPU), off by default. modelir's metrics go through its own
aggregating meter (`modelir.telemetry.meter`).

A tracer or meter provider already installed in the process (by `opentelemetry-instrument`, say) is joined, not
replaced: modelir's spans and metrics go to it, with its sampler, processors and readers. Its sampler is then the one
that decides; a warning says so when `modelir serve`'s 10% default would otherwise have applied.

This module imports the SDK, which is the `otel` extra (`pip install 'modelir[otel]'`); the rest of the package
needs only `opentelemetry-api`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the SDK is imported where it is used (the `otel` extra)
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.trace.export import SpanExporter

_ENDPOINT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


_logger = logging.getLogger(__name__)
FAST_SPANS_ENV = "MODELIR_OTLP_FAST_SPANS"


class TelemetrySetupError(ValueError):
    """The `OTEL_*` configuration asks for something that cannot be set up; the message names the variable."""


@dataclass
class Installed:
    """What `configure_from_env` installed or joined; `shutdown()` flushes and stops what it built (a joined provider
    stays its installer's to stop)."""

    tracer_provider: object | None = None
    meter_provider: object | None = None
    joined_tracer_provider: object | None = None
    joined_meter_provider: object | None = None

    def shutdown(self) -> None:
        from modelir.telemetry import _runtime

        if self.meter_provider is not None and self.meter_provider is _runtime._own_meter:
            _runtime.use_meter(None)
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None:
                provider.shutdown()  # type: ignore[attr-defined]


def requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for any telemetry."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER")) or any(
        environ.get(name, "").strip() for name in _ENDPOINT_VARIABLES
    )


def _exporter_names(environ: Mapping[str, str], signal: str) -> list[str]:
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    names = [n.strip().lower() for n in environ.get(variable, "otlp").split(",") if n.strip()]
    for name in names:
        if name not in ("otlp", "console", "none"):
            raise TelemetrySetupError(f"{variable}={name!r}: modelir supports otlp, console and none")
    return [n for n in names if n != "none"]


def _protocol(environ: Mapping[str, str], signal: str) -> str:
    variable = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    protocol = environ.get(variable) or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    protocol = protocol.strip().lower()
    if protocol not in ("grpc", "http/protobuf"):
        raise TelemetrySetupError(
            f"{variable} (or OTEL_EXPORTER_OTLP_PROTOCOL)={protocol!r}: use grpc or http/protobuf"
        )
    return protocol


def _span_exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # the stdout of now, not of import time
    if _protocol(environ, "traces") == "grpc":
        if environ.get(FAST_SPANS_ENV, "").strip().lower() in ("true", "1"):
            # Opted in: the stock gRPC exporter with modelir's span encoder, a third of the stock encoder's CPU.
            from modelir.telemetry.otlp import FastOTLPSpanExporter

            return FastOTLPSpanExporter()
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]

    return OTLPSpanExporter()


def _metric_exporter(name: str, environ: Mapping[str, str]) -> MetricExporter:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stdout)
    if _protocol(environ, "metrics") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]
    return OTLPMetricExporter()


# `modelir serve`'s sampler when OTEL_TRACES_SAMPLER is unset: a request that arrives with a trace context is
# recorded as its caller decided; of the traces that start at the server, one in ten is kept. Keeping every trace
# of a busy gateway costs a quarter of its throughput with the Python SDK (bench/README.md);
# OTEL_TRACES_SAMPLER=parentbased_always_on keeps them all.
SERVER_SAMPLER_RATIO = 0.1


def _sampler_ratio(default: float) -> float:
    """The default sampler's ratio: `OTEL_TRACES_SAMPLER_ARG` when it is a ratio (it is the argument the
    `parentbased_traceidratio` sampler, which the default is, would take), else `default`."""
    given = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not given:
        return default
    try:
        ratio = float(given)
    except ValueError:
        raise TelemetrySetupError(f"OTEL_TRACES_SAMPLER_ARG={given!r}: give a ratio between 0 and 1") from None
    if not 0.0 <= ratio <= 1.0:
        raise TelemetrySetupError(f"OTEL_TRACES_SAMPLER_ARG={given!r}: give a ratio between 0 and 1")
    return ratio


def _installed_providers() -> tuple[object | None, object | None]:
    """The tracer and meter providers already installed in the process (an SDK's, say), or None for each not."""
    from opentelemetry import metrics, trace

    from modelir.telemetry import _runtime

    tracer_provider: object = trace.get_tracer_provider()
    meter_provider: object = metrics.get_meter_provider()
    return (
        None if isinstance(tracer_provider, _runtime._DISABLED_TRACER_PROVIDERS) else tracer_provider,
        None if isinstance(meter_provider, _runtime._DISABLED_METER_PROVIDERS) else meter_provider,
    )


def configure_from_env(
    environ: Mapping[str, str] = os.environ, *, default_sampler_ratio: float | None = None
) -> Installed | None:
    """Install tracer and meter providers as the environment says; None when it asks for nothing.

    A provider already installed in the process is joined instead (modelir's hooks use the global ones). The tracer
    provider built here becomes the process's global one (so other instrumentation in the process shares it). The
    metrics go through an `AggregatingMeter` (`modelir.telemetry.meter`: modelir's own instruments, exact, at a
    sixth of the SDK's cost per measurement), which only modelir measures with; when `OTEL_METRICS_EXEMPLAR_FILTER`
    asks for exemplars, an SDK meter provider is built instead and becomes the global one. With
    `default_sampler_ratio`, a tracer provider the environment does not give a sampler (OTEL_TRACES_SAMPLER) gets
    ParentBased(TraceIdRatioBased(ratio)).
    """
    if not requested(environ):
        return None
    joined_tracer, joined_meter = _installed_providers()
    installed = build_from_env(
        environ, default_sampler_ratio=default_sampler_ratio, traces=joined_tracer is None, metrics=joined_meter is None
    )
    if installed is None:
        return None
    from opentelemetry import metrics, trace

    from modelir.telemetry import _runtime
    from modelir.telemetry.meter import AggregatingMeter

    installed.joined_tracer_provider, installed.joined_meter_provider = joined_tracer, joined_meter
    if joined_tracer is not None and default_sampler_ratio is not None and not os.environ.get("OTEL_TRACES_SAMPLER"):
        _logger.warning(
            "modelir: joined the tracer provider already installed in this process (%s); its sampler decides which "
            "traces are kept, not modelir serve's default of %g: set OTEL_TRACES_SAMPLER=parentbased_traceidratio "
            "and OTEL_TRACES_SAMPLER_ARG for a ratio",
            type(joined_tracer).__name__,
            default_sampler_ratio,
        )
    if installed.tracer_provider is not None:
        trace.set_tracer_provider(installed.tracer_provider)  # type: ignore[arg-type]
    if isinstance(installed.meter_provider, AggregatingMeter):
        _runtime.use_meter(installed.meter_provider)
    elif installed.meter_provider is not None:
        metrics.set_meter_provider(installed.meter_provider)  # type: ignore[arg-type]
    return installed


def build_from_env(
    environ: Mapping[str, str] = os.environ,
    *,
    default_sampler_ratio: float | None = None,
    traces: bool = True,
    metrics: bool = True,
) -> Installed | None:
    """The tracer and meter providers the environment asks for, not yet installed; None when it asks for none.
    `traces`, `metrics`: False leaves that signal's provider out (one is installed already).

    `environ` decides which signals and exporters; the SDK's own pieces (exporter endpoints and headers, batching,
    sampler, resource) read the process environment, as they always do.
    """
    if not requested(environ):
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TelemetrySetupError(
            f"OTEL_* variables ask for telemetry, but the OpenTelemetry SDK is not installed ({exc}); "
            "install it with: pip install 'modelir[otel]'"
        ) from None
    resource = Resource.create()  # reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "modelir"}))
    installed = Installed()
    span_exporters = [_span_exporter(n, environ) for n in _exporter_names(environ, "traces")] if traces else []
    if span_exporters:
        sampler = None  # the SDK's: OTEL_TRACES_SAMPLER, else parent-based always-on
        if default_sampler_ratio is not None and not os.environ.get("OTEL_TRACES_SAMPLER", "").strip():
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

            sampler = ParentBased(TraceIdRatioBased(_sampler_ratio(default_sampler_ratio)))
        # The SDK's provider reads the span limits and the id generator from the environment itself.
        tracer_provider = TracerProvider(resource=resource, sampler=sampler)
        for exporter in span_exporters:
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        installed.tracer_provider = tracer_provider
    metric_exporters = [_metric_exporter(n, environ) for n in _exporter_names(environ, "metrics")] if metrics else []
    if metric_exporters:
        # Exemplars (a sampled span's id on a histogram bucket) cost a few microseconds on every measurement
        # taken inside a sampled span, and only the SDK's instruments keep them; without them, modelir's own
        # aggregating meter measures for a sixth of the SDK's cost.
        exemplars = environ.get("OTEL_METRICS_EXEMPLAR_FILTER", "").strip().lower()
        if exemplars and exemplars != "always_off":
            readers = [PeriodicExportingMetricReader(exporter) for exporter in metric_exporters]
            installed.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        else:
            from modelir.telemetry.meter import AggregatingMeter

            installed.meter_provider = AggregatingMeter(resource, metric_exporters)
    return installed


@contextmanager
def installed_from_env(
    environ: Mapping[str, str] = os.environ, *, default_sampler_ratio: float | None = None
) -> Iterator[Installed | None]:
    """`configure_from_env` for the length of a block, then flush what is still batched and stop."""
    installed = configure_from_env(environ, default_sampler_ratio=default_sampler_ratio)
    try:
        yield installed
    finally:
        if installed is not None:
            installed.shutdown()
