"""Panels as small functions: every panel gets a title, a description, a unit and the templated datasource."""

from __future__ import annotations

from grafana_foundation_sdk.builders import heatmap as hm
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.builders.dashboard import ThresholdsConfig
from grafana_foundation_sdk.models.dashboard import DataSourceRef, Threshold, ThresholdsMode
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from vllm_triton_observable.common.vllm_compat import family_since

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


def query(expr: str, legend: str = "", ref: str = "A") -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    return q.legend_format(legend) if legend else q


def _thresholds(steps: list[tuple[float | None, str]]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(
        [Threshold(value=v, color=c) for v, c in steps])


def graph(title: str, description: str, unit: str, *targets: tuple[str, str], span: int = 12,
          stacked: bool = False, thresholds: list[tuple[float | None, str]] | None = None,
          family: str | None = None) -> timeseries.Panel:
    """`family`: the vLLM family plotted, when it exists only from a vLLM release on; the panel then says so
    instead of showing a bare "No data" with older releases."""
    since = family_since(family) if family else None
    if since:
        description = f"{description} Needs vLLM {since} or later: empty with older releases."
    panel = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
             .span(span).height(8).min(0).fill_opacity(10 if not stacked else 40))
    if since:
        panel = panel.no_value(f"needs vLLM {since} or later")
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(expr, legend, chr(ord("A") + i)))
    if thresholds:
        panel = panel.thresholds(_thresholds(thresholds))
    return panel


def single(title: str, description: str, unit: str, expr: str, span: int = 4,
           thresholds: list[tuple[float | None, str]] | None = None, legend: str = "") -> stat.Panel:
    panel = (stat.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
             .span(span).height(5).with_target(query(expr, legend)))
    if thresholds:
        panel = panel.thresholds(_thresholds(thresholds))
    return panel


def heatmap(title: str, description: str, unit: str, expr: str, span: int = 8) -> hm.Panel:
    target = query(expr, "{{le}}").format(PromQueryFormat.HEATMAP)
    return (hm.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
            .span(span).height(8).with_target(target))
