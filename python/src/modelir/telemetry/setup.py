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
Spans exported over OTLP are modelir's lean spans (`modelir.telemetry.tracer`), OTLP/gRPC ones written by
`modelir.telemetry.otlp`'s cheaper encoder; modelir's metrics go through its own aggregating meter
(`modelir.telemetry.meter`).

This module imports the SDK, which is the `otel` extra (`pip install 'modelir[otel]'`); the rest of the package
needs only `opentelemetry-api`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

_ENDPOINT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


class TelemetrySetupError(ValueError):
    """The `OTEL_*` configuration asks for something that cannot be set up; the message names the variable."""


@dataclass
class Installed:
    """What `configure_from_env` installed; `shutdown()` flushes and stops it."""

    tracer_provider: object | None = None
    meter_provider: object | None = None

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


def _names_otlp(environ: Mapping[str, str]) -> bool:
    return _exporter_names(environ, "traces") == ["otlp"]


def _protocol(environ: Mapping[str, str], signal: str) -> str:
    variable = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    protocol = environ.get(variable) or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    protocol = protocol.strip().lower()
    if protocol not in ("grpc", "http/protobuf"):
        raise TelemetrySetupError(
            f"{variable} (or OTEL_EXPORTER_OTLP_PROTOCOL)={protocol!r}: use grpc or http/protobuf"
        )
    return protocol


def _span_exporter(name: str, environ: Mapping[str, str]):
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # the stdout of now, not of import time
    if _protocol(environ, "traces") == "grpc":
        # The stock gRPC exporter with modelir's span encoder: a third of the stock encoder's CPU (`otlp`).
        from modelir.telemetry.otlp import FastOTLPSpanExporter

        return FastOTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _metric_exporter(name: str, environ: Mapping[str, str]):
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


def configure_from_env(
    environ: Mapping[str, str] = os.environ, *, default_sampler_ratio: float | None = None
) -> Installed | None:
    """Install tracer and meter providers as the environment says; None when it asks for nothing.

    The tracer provider becomes the process's global one (so other instrumentation in the process shares it). The
    metrics go through an `AggregatingMeter` (`modelir.telemetry.meter`: modelir's own instruments, exact, at a
    sixth of the SDK's cost per measurement), which only modelir measures with; when `OTEL_METRICS_EXEMPLAR_FILTER`
    asks for exemplars, an SDK meter provider is built instead and becomes the global one. With
    `default_sampler_ratio`, a tracer provider the environment does not give a sampler (OTEL_TRACES_SAMPLER) gets
    ParentBased(TraceIdRatioBased(ratio)).
    """
    installed = build_from_env(environ, default_sampler_ratio=default_sampler_ratio)
    if installed is not None:
        from opentelemetry import metrics, trace

        from modelir.telemetry import _runtime
        from modelir.telemetry.meter import AggregatingMeter

        if installed.tracer_provider is not None:
            trace.set_tracer_provider(installed.tracer_provider)  # type: ignore[arg-type]
        if isinstance(installed.meter_provider, AggregatingMeter):
            _runtime.use_meter(installed.meter_provider)
        elif installed.meter_provider is not None:
            metrics.set_meter_provider(installed.meter_provider)  # type: ignore[arg-type]
    return installed


def build_from_env(
    environ: Mapping[str, str] = os.environ, *, default_sampler_ratio: float | None = None
) -> Installed | None:
    """The tracer and meter providers the environment asks for, not yet installed; None when it asks for none.

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
    span_exporters = [_span_exporter(n, environ) for n in _exporter_names(environ, "traces")]
    if span_exporters:
        sampler = None  # the SDK's: OTEL_TRACES_SAMPLER, else parent-based always-on
        if default_sampler_ratio is not None and not os.environ.get("OTEL_TRACES_SAMPLER", "").strip():
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

            sampler = ParentBased(TraceIdRatioBased(_sampler_ratio(default_sampler_ratio)))
        lean = len(span_exporters) == 1 and _names_otlp(environ)
        # For lean spans, the SDK's provider only resolves the sampler and id generator from the environment.
        tracer_provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=not lean)
        if lean:
            # One OTLP exporter: modelir's lean spans (`modelir.telemetry.tracer`), with the sampler, id generator
            # and resource the SDK's provider resolved from the environment.
            from modelir.telemetry.tracer import LeanTracerProvider

            installed.tracer_provider = LeanTracerProvider(
                span_exporters[0],
                sampler=tracer_provider.sampler,
                resource=tracer_provider.resource,
                id_generator=tracer_provider.id_generator,
            )
        else:  # the console exporter prints the SDK's own span JSON: the SDK's spans
            for exporter in span_exporters:
                tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
            installed.tracer_provider = tracer_provider
    metric_exporters = [_metric_exporter(n, environ) for n in _exporter_names(environ, "metrics")]
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
