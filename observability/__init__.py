"""What the dashboards and the alert rules share: one config of selectors, thresholds and SLOs
(`config.py`), the PromQL building blocks (`promql.py`) and the writer of generated files.

Metric and label names come from `vllm_triton_observable.metrics.names`; nothing here imports an engine.
"""
