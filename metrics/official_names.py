"""Family names the official backend exports that vLLM 0.32 no longer defines, kept so that dashboards and alerts
built on the official backend keep working.

The official backend exports 8 families; vLLM 0.32 defines 7 of them itself. The eighth,
`vllm:time_per_output_token_seconds`, was vLLM's first name for the inter-token latency (deprecated, then removed
in favour of `vllm:inter_token_latency_seconds`). The registry exposes it as an alias: a renamed copy of vLLM's
family made when the registry is collected (once per publish), so it has the same observations, labels and buckets
and costs nothing per token.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from prometheus_client.metrics_core import Metric

from . import names


class Alias(NamedTuple):
    name: str
    documentation: str


# vLLM's family name → the extra name it is also exposed under.
ALIASES = {
    names.VLLM_INTER_TOKEN_LATENCY: Alias(
        names.VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL,
        "Histogram of inter-token latency in seconds (the official vllm backend's name for "
        f"{names.VLLM_INTER_TOKEN_LATENCY}; the same observations)."),
}


def renamed(family: Any, alias: Alias) -> Metric:
    """A copy of a collected family under the alias's name (its samples' suffixes kept)."""
    copy = Metric(alias.name, alias.documentation, family.type)
    copy.samples = [s._replace(name=alias.name + s.name[len(family.name):]) for s in family.samples]
    return copy
