"""Family names the official backend exports that vLLM 0.32 no longer defines, kept so that dashboards and alerts
built on the official backend keep working.

The official backend exports 8 families; vLLM 0.32 defines 7 of them itself. The eighth,
`vllm:time_per_output_token_seconds`, was vLLM's first name for the inter-token latency (deprecated, then removed
in favour of `vllm:inter_token_latency_seconds`): the same observations go into both, with the same labels and
buckets.
"""

from __future__ import annotations

from typing import Any

from . import names
from .registry import InstanceRegistry, Kind

HELP = ("Histogram of inter-token latency in seconds (the official vllm backend's name for "
        f"{names.VLLM_INTER_TOKEN_LATENCY}; the same observations).")


class OfficialTimePerOutputToken:
    """Per engine, the twin of vLLM's inter-token latency histogram; fed by the stat logger's `record()`."""

    def __init__(self, registry: InstanceRegistry, itl_children: dict[int, Any]) -> None:
        first = next(iter(itl_children.values()))
        family = registry.classes()[Kind.HISTOGRAM](
            names.VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL, HELP, labelnames=list(first._labelnames),
            buckets=[b for b in first._upper_bounds if b != float("inf")])
        self._children = {engine: family.labels(*child._labelvalues) for engine, child in itl_children.items()}

    def record(self, iteration_stats: Any, engine_idx: int) -> None:
        if iteration_stats is not None:
            for itl in iteration_stats.inter_token_latencies_iter:
                self._children[engine_idx].observe(itl)
