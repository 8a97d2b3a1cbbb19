"""vLLM's metrics (and the backend's own) published as Triton custom metrics on :8002/metrics.

    local.py          prometheus_client-compatible metric classes that only accumulate in memory
    stat_logger.py    vLLM's PrometheusStatLogger with its metric classes swapped for the local ones
    publisher.py      the thread that pushes accumulated updates to Triton (`pb_utils.MetricFamily`)
    backend_families.py  the backend's own `vllm_triton_*` families
    catalogue.py      the list of families for a vLLM configuration (docs, dashboards, alerts, tests)
"""
