"""The frame every dashboard shares: uid, tags, variables (datasource, job, instance, model, engine, SLOs)."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import CustomVariable, Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, VariableOption, VariableRefresh, VariableSort

from dashboards.panels import DATASOURCE
from observability.config import Config
from vllm_triton_observable.metrics import names
from vllm_triton_observable.metrics.registry import triton_le_label

TAGS = ["vllm", "triton", "llm", "generated"]


def _label_variable(name: str, label: str, query: str) -> QueryVariable:
    return (QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(VariableOption(selected=True, text="All", value="$__all")))


def _slo_variable(name: str, label: str, buckets: tuple[float, ...], default: float) -> CustomVariable:
    """An SLO threshold to pick among the histogram's buckets (any other value would match no bucket), spelled as
    Triton writes it (the queries match vLLM's spelling too: observability.promql.le_matcher)."""
    values = [triton_le_label(b) for b in buckets]
    return (CustomVariable(name).label(label).values(",".join(values))
            .current(VariableOption(selected=True, text=triton_le_label(default), value=triton_le_label(default))))


def dashboard(uid: str, title: str, description: str, config: Config, slo_buckets: dict[str, tuple[float, ...]]
              ) -> Dashboard:
    board = (Dashboard(title).uid(uid).description(description).tags(TAGS).refresh("30s")
             .time("now-1h", "now").tooltip(DashboardCursorSync.CROSSHAIR)
             .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
             .with_variable(_label_variable("job", "job",
                                            f"label_values({names.TRITON_SUCCESS}{{{config.triton_selector}}}, job)"))
             .with_variable(_label_variable("instance", "instance",
                                            f'label_values({names.TRITON_SUCCESS}{{job=~"$job"}}, instance)'))
             .with_variable(_label_variable(
                 "model", "model", f'label_values({names.TRITON_SUCCESS}{{job=~"$job", instance=~"$instance"}}, '
                                   f"{names.MODEL})"))
             .with_variable(_label_variable(
                 "engine", "engine", f'label_values({names.VLLM_RUNNING}{{job=~"$job", instance=~"$instance", '
                                     f'{names.MODEL}=~"$model"}}, {names.ENGINE})')))
    for slo in config.slos:
        board = board.with_variable(_slo_variable(f"slo_{slo.name.lower()}", f"{slo.name} SLO (s)",
                                                  slo_buckets[slo.histogram], slo.threshold_s))
    return board


def row(title: str) -> Row:
    return Row(title)
