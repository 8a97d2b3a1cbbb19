"""The generated dashboards: reproducible, linted, round-trip through the SDK, and every query shows data
from a real Prometheus scraping the real tritonserver."""

from __future__ import annotations

import concurrent.futures
import json
import re

import promql_parser
import pytest
from helpers import ROOT, generate, generate_stream, grpc_inputs, grpc_stream, run
from prometheus_server import Prometheus, substitute
from promql_ast import RATE_INTERVAL, is_call, metric_names, parse, unwrap, walk

from vllm_triton_observable.common.vllm_compat import family_since
from vllm_triton_observable.metrics import names

GENERATED = ROOT / "dashboards" / "generated"
# Gauges whose names end like counter/histogram samples.
GAUGE_NAMES = {names.TRITON_PENDING}
COUNTER_LIKE = ("_total", "_count", "_sum", "_bucket")
# Families that cannot have data on this test server, with the reason.
EXEMPT = {name: "no NVIDIA GPU on the test machines" for name in names.GPU_ONLY}


def boards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(GENERATED.glob("*.json"))}


def panels() -> list[tuple[str, dict]]:
    return [(name, panel) for name, board in boards().items() for panel in board["panels"] if panel["type"] != "row"]


def exprs() -> list[tuple[str, str, str]]:
    return [(name, panel["title"], target["expr"]) for name, panel in panels() for target in panel["targets"]]


def test_generated_files_are_up_to_date():
    from dashboards.build import main

    assert main(["--check"]) == 0, "run `make dashboards`"


def test_the_slo_buckets_are_vllms_own():
    from observability.config import DEFAULT
    from vllm_triton_observable.metrics.catalogue import BASE_ENGINE, vllm_families

    vllm = {f.name: f.buckets for f in vllm_families(BASE_ENGINE)}
    for slo in DEFAULT.slos:
        assert slo.buckets == vllm[slo.histogram], slo.name


def test_make_dashboards_and_alerts_import_no_engine():
    import subprocess
    import sys

    code = ("import sys; import dashboards.build, alerts.build; "
            "dashboards.build.render(); alerts.build.render(); "
            "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_expected_dashboards_exist():
    from observability.config import DashboardUID

    assert {b["uid"] for b in boards().values()} == {v for k, v in vars(DashboardUID).items() if k.isupper()}


def test_json_round_trips_through_the_sdk_models():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    for name, board in boards().items():
        model = Dashboard.from_json(board)
        again = json.loads(JSONEncoder(sort_keys=True).encode(model))
        assert again["uid"] == board["uid"] and len(again["panels"]) == len(board["panels"]), name
        assert [p.get("targets") for p in again["panels"]] == [p.get("targets") for p in board["panels"]], name


def test_variables_and_datasource_are_templated():
    for name, board in boards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert {"datasource", "job", "instance", "model", "engine"} <= set(variables), name
        for label in ("job", "instance", "model", "engine"):
            assert variables[label]["multi"] and variables[label]["includeAll"], (name, label)
        text = json.dumps(board)
        uids = set(re.findall(r'"uid": "([^"]*)"', text)) - {board["uid"]}
        assert uids == {"${datasource}"}, (name, uids)  # no hard-coded datasource anywhere


def test_latency_panels_link_to_the_backends_traces_in_a_tempo_variable():
    from urllib.parse import parse_qs, urlsplit


    board = boards()["vllm-triton-latency.json"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["traces"]["type"] == "datasource" and variables["traces"]["query"] == "tempo"
    for panel in (p for p in board["panels"] if p["type"] != "row"):
        (link,) = panel["fieldConfig"]["defaults"]["links"]
        url = urlsplit(link["url"])
        assert url.path == "/explore" and link["targetBlank"], panel["title"]
        pane = json.loads(parse_qs(url.query)["panes"][0])["traces"]
        assert pane["datasource"] == pane["queries"][0]["datasource"]["uid"] == "${traces}"
        assert pane["range"] == {"from": "${__from}", "to": "${__to}"}
        query = pane["queries"][0]["query"]
        assert f'resource.service.name="{names.TRACE_SERVICE}"' in query
        assert f'span.{names.TRACE_MODEL_ATTRIBUTE}=~"${{model:pipe}}"' in query
    assert "traces" not in json.dumps(boards()["vllm-triton-overview.json"]["templating"])  # latency only


@pytest.mark.parametrize("name, panel", panels(), ids=lambda v: v if isinstance(v, str) else v["title"])
def test_every_panel_has_title_description_unit(name, panel):
    assert panel["title"] and panel.get("description"), panel
    assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
    assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def lint(expr: str) -> list[str]:
    problems = []
    for node, parents in walk(parse(expr)):
        if isinstance(node, promql_parser.MatrixSelector) and node.range != RATE_INTERVAL:
            problems.append(f"rate window [{node.range.total_seconds():g}s] is not $__rate_interval")
        if isinstance(node, promql_parser.VectorSelector) and node.name.endswith(COUNTER_LIKE) and (
                node.name not in GAUGE_NAMES):
            if not (len(parents) >= 2 and is_call(parents[-2], "rate", "increase")):
                problems.append(f"{node.name} is not under rate()/increase()")
        if is_call(node, "histogram_quantile"):
            inner = unwrap(node.args[1])
            if not (isinstance(inner, promql_parser.AggregateExpr) and str(inner.op) == "sum"
                    and inner.modifier is not None and "le" in inner.modifier.labels):
                problems.append("histogram_quantile without sum by (le)")
        if isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "/":
            divisor = unwrap(node.rhs)
            guarded = (isinstance(divisor, promql_parser.BinaryExpr) and str(divisor.op) == ">"
                       and isinstance(divisor.rhs, promql_parser.NumberLiteral) and divisor.rhs.val == 0)
            if not guarded and not isinstance(divisor, promql_parser.NumberLiteral):
                problems.append("a ratio does not divide by (x > 0)")
        if isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "or" and is_call(unwrap(node.rhs), "vector"):
            problems.append("or vector(0) hides missing data as zero")
    return problems


@pytest.mark.parametrize("name, title, expr", exprs(), ids=lambda v: v[:60] if isinstance(v, str) else v)
def test_queries_follow_the_rules(name, title, expr):
    assert lint(expr) == [], (title, expr)


def test_the_lint_catches_known_defects():
    assert lint(f'rate({names.VLLM_PREEMPTIONS}{{a="b"}}[5m])') == ["rate window [300s] is not $__rate_interval"]
    assert lint(f'{names.VLLM_PROMPT_TOKENS}{{a="b"}}')
    assert lint('histogram_quantile(0.9, rate(x_bucket{a="b"}[$__rate_interval]))')
    assert lint('(sum(rate(a_total{a="b"}[$__rate_interval]))) / (sum(rate(b_total{a="b"}[$__rate_interval])))')
    assert lint('histogram_quantile(0.9, sum by (le) (rate(x_bucket{a="b"}[$__rate_interval]))) or vector(0)')


def known_families() -> set[str]:
    """Every family the running vLLM, the backend and Triton export."""
    from vllm_triton_observable.metrics.catalogue import catalogue

    return {e.spec.name for e in catalogue()} | set(names.TRITON_FAMILIES)


def newer_than_this_vllm(expr: str, known: set[str]) -> bool:
    """Whether the query plots a family that the running vLLM does not have yet (common/vllm_compat.py)."""
    return any(name not in known and family_since(name) for name in metric_names(expr))


def test_every_metric_a_panel_uses_exists():
    known = known_families()
    suffixes = ("_bucket", "_sum", "_count")
    for _, title, expr in exprs():
        for name in metric_names(expr):
            base = next((name[: -len(s)] for s in suffixes if name.endswith(s) and name[: -len(s)] in known), name)
            assert base in known or family_since(base), (title, name)


def test_a_panel_of_a_family_newer_than_vllm_026_says_so():
    """Where an older vLLM of the supported window lacks the family, the panel says which release it needs rather
    than showing a bare "No data"."""
    found = 0
    for _, panel in panels():
        since = {family_since(n) for t in panel["targets"] for n in metric_names(t["expr"])} - {None}
        if since:
            found += 1
            (release,) = since
            assert f"Needs vLLM {release} or later" in panel["description"], panel["title"]
            assert panel["fieldConfig"]["defaults"]["noValue"] == f"needs vLLM {release} or later"
    assert found >= 1


# -- live ----------------------------------------------------------------------------------------------
def workload(server) -> None:
    """Traffic that touches every panel: plain, streamed, repeated prompts (prefix cache), bad and cancelled."""
    body = {"text_input": "Dashboards need data " * 8, "parameters": {"max_tokens": 24, "ignore_eos": True}}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        jobs = [pool.submit(generate, server, "vllm_model", body) for _ in range(8)]
        jobs += [pool.submit(generate_stream, server, "vllm_model",
                             {**body, "parameters": {**body["parameters"], "stream": True}}) for _ in range(6)]
        jobs += [pool.submit(generate, server, "vllm_model", {"text_input": "x", "parameters": {"n": 0}})]
        for job in jobs:
            job.result()
    run(grpc_stream(server, "vllm_model", grpc_inputs("cancel me", sampling={"max_tokens": 500}), stop_after=2))


def test_every_panel_query_returns_data_from_a_real_prometheus(server, tmp_path):
    with Prometheus(tmp_path, [f"127.0.0.1:{server.metrics_port}"]) as prometheus:
        prometheus.wait_for_scrapes(2)
        workload(server)
        prometheus.wait_for_scrapes(8)
        workload(server)
        import time

        time.sleep(3)
        empty = []
        known = known_families()
        for name, title, expr in exprs():
            if metric_names(expr) & set(EXEMPT) or newer_than_this_vllm(expr, known):
                continue
            if not prometheus.query(substitute(expr)):
                empty.append(f"{name} / {title}: {expr}")
        assert empty == [], "\n".join(empty)
