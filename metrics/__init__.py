"""vLLM's metrics (and the backend's own) published as Triton custom metrics on :8002/metrics (and over OTLP).

    names.py            every metric and label name the project refers to
    registry.py         a private prometheus_client registry per model instance, and the family specs
    stat_logger.py      vLLM's PrometheusStatLogger bound to that registry, every call guarded
    official_names.py   the official backend's family that vLLM no longer defines (time_per_output_token)
    errors.py           failures inside the metrics path, counted and logged once per kind
    histogram.py        the histogram class vLLM's logger uses (per-bucket sums) and the replay into Triton's
    publisher.py        the thread that sends changes to Triton (`pb_utils.MetricFamily`) once a second
    exposition_file.py  VLLM_TRITON_EXPOSITION_DIR: the registry as vLLM's own /metrics text, to compare
    otlp_metrics.py, exemplars.py   OTLP_METRICS: the registry over OTLP/HTTP, with exemplars of traced requests
    backend_families.py, health_families.py   the backend's own `vllm_triton_*` families
    exporter.py         the gating decision and the above wired for one instance
    catalogue.py        every family, derived from the installed vLLM (docs, dashboards, alerts, tests)

Imports only `common`: the composition root hands it callbacks.
"""
