"""From a latency panel to the traces behind it: a `traces` data-source variable (Tempo) and a data link that opens
Grafana Explore on that data source with a TraceQL search for this backend's request spans of the selected models,
over the dashboard's time range.

Off when not set: the variable lists only Tempo data sources; in a Grafana without one it is empty and the link
has nothing to open, so dashboards work unchanged for operators who do not trace.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from grafana_foundation_sdk.builders.dashboard import DashboardLink, DatasourceVariable

from vllm_triton_observable.metrics.names import TRACE_MODEL_ATTRIBUTE, TRACE_SERVICE

VARIABLE = "traces"
# Grafana substitutes these in a link's URL; they must reach it unencoded.
_GRAFANA_REFS = (f"${{{VARIABLE}}}", "${model:pipe}", "${__from}", "${__to}")


def traces_variable() -> DatasourceVariable:
    return DatasourceVariable(VARIABLE).label("Traces data source").type("tempo")


def traceql() -> str:
    """The backend's request spans (one per request; vLLM's `llm_request` is their child) for the selected models."""
    return f'{{resource.service.name="{TRACE_SERVICE}" && span.{TRACE_MODEL_ATTRIBUTE}=~"${{model:pipe}}"}}'


def explore_url() -> str:
    pane = {"traces": {"datasource": f"${{{VARIABLE}}}", "range": {"from": "${__from}", "to": "${__to}"},
                       "queries": [{"refId": "A", "datasource": {"type": "tempo", "uid": f"${{{VARIABLE}}}"},
                                    "queryType": "traceql", "query": traceql(), "limit": 20}]}}
    encoded = quote(json.dumps(pane, separators=(",", ":")), safe="")
    for ref in _GRAFANA_REFS:
        encoded = encoded.replace(quote(ref, safe=""), ref)
    return f"/explore?schemaVersion=1&orgId=1&panes={encoded}"


def trace_link() -> DashboardLink:
    return (DashboardLink("Traces of these requests (Tempo)").url(explore_url()).target_blank(True)
            .tooltip("The backend's request spans of the selected models over this time range, in Explore"))
