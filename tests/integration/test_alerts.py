"""Alert rules: promtool check and unit tests for every alert, lint, metric contract, Grafana rule round trip.

The promtool scenarios use the checked-in generated rules (annotations stripped, since their expansion is
tested separately) and hard-coded input series, so they test the real expressions against real Prometheus
semantics: `_total` names, rate windows, `for` durations and threshold boundaries.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from urllib.parse import urlparse

import pytest
import yaml
from helpers import ROOT
from promql_ast import metric_names

from observability.config import DEFAULT
from vllm_triton_observable.metrics import names

GENERATED = ROOT / "alerts" / "generated"
RULES = GENERATED / "prometheus-rules.yaml"
GROUP = {"job": "triton", "instance": "h:8002", "model": "m", "model_instance": "m_0_0"}
LABELS = 'job="triton", instance="h:8002", model="m", model_instance="m_0_0", version="1"'
VLLM = LABELS + ', engine="0", model_name="x"'


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed (scripts/ensure_prometheus.sh installs it)"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def alert_rules() -> list[dict]:
    return [r for r in rules() if "alert" in r]


def test_generated_files_are_up_to_date():
    from alerts.build import main

    assert main(["--check"]) == 0, "run `make alerts`"


def test_promtool_checks_the_rule_file():
    """The PrometheusRule in deploy/kubernetes carries the same groups (tests/integration/test_kubernetes.py)."""
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_well_formed():
    runbook = (ROOT / "alerts" / "runbook.md").read_text()
    # the generated dashboards as Grafana imports them (the rules' links were resolved from their definitions)
    boards = [json.loads(path.read_text()) for path in (ROOT / "dashboards" / "generated").glob("*.json")]
    panels = {(board["uid"], panel["title"]): panel["id"] for board in boards for panel in board["panels"]}
    for rule in alert_rules():
        name, annotations = rule["alert"], rule["annotations"]
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name) and len(name) <= 40, name
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name
        summary = annotations["summary"]
        assert "{{" not in summary and summary[0].isupper() and summary.endswith("."), (name, summary)
        assert "{{" in annotations["description"], (name, "description must be templated")
        runbook_url, dashboard_url = annotations["runbook_url"], annotations["dashboard_url"]
        assert all(urlparse(u).scheme == "https" and urlparse(u).netloc for u in (runbook_url, dashboard_url)), (
            name, "links must be absolute: alerts are read outside Grafana")
        anchor = runbook_url.split("#", 1)[1]
        assert f"\n## {name}\n" in runbook and anchor == name.lower(), name
        uid, panel = re.fullmatch(re.escape(DEFAULT.grafana_base) + r"/([\w-]+)\?viewPanel=(\d+)",
                                  dashboard_url).groups()
        assert (uid, int(panel)) in {(u, i) for (u, _), i in panels.items()}, name


def test_every_series_a_rule_uses_is_exported():
    from vllm_triton_observable.metrics.catalogue import catalogue

    known = {e.spec.name for e in catalogue()} | set(names.TRITON_FAMILIES) | {"up"}
    known |= {r["record"] for r in rules() if "record" in r}
    for rule in rules():
        for name in metric_names(rule["expr"]):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert name in known or base in known, (rule.get("alert") or rule.get("record"), name)


def test_grafana_rules_round_trip_through_the_sdk():
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.alerting import Rule

    register_default_plugins()
    provisioning = json.loads((GENERATED / "grafana-alert-rules.json").read_text())
    grafana_rules = provisioning["groups"][0]["rules"]
    assert len(grafana_rules) == len(alert_rules())
    assert len({r["title"] for r in grafana_rules}) == len(grafana_rules)  # unique titles in the group
    for rule in grafana_rules:
        again = Rule.from_json(rule).to_json()
        assert json.loads(json.dumps(again, default=lambda o: o.to_json())) == rule, rule["title"]
        assert "model:vllm_triton_slo" not in json.dumps(rule)  # recording rules are inlined for Grafana


# -- promtool unit tests ---------------------------------------------------------------------------------
def fired(alert: str, at: str, *labelsets: dict) -> dict:
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels} for labels in labelsets]}


def quiet(alert: str, at: str) -> dict:
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


def burn_series(histogram: str, le: str, good_per_min: float, labels: str = VLLM, per_min: float = 100
                ) -> list[dict]:
    return [{"series": f'{histogram}_bucket{{{labels}, le="{le}"}}', "values": f"0+{good_per_min:g}x60"},
            {"series": f"{histogram}_count{{{labels}}}", "values": f"0+{per_min:g}x60"}]


def outcome(name: str, per_min: int, labels: str = LABELS) -> dict:
    return {"series": f'{names.REQUESTS_FINISHED}{{{labels}, outcome="{name}"}}', "values": f"0+{per_min}x30"}


def burn(severity: str, long: str, short: str) -> dict:
    """A fleet alert's labels: the model over all its replicas, no instance."""
    return {"job": "triton", "model": "m", "severity": severity, "long_window": long, "short_window": short}


FLEET = {"job": "triton", "model": "m"}
REPLICA_2 = LABELS.replace("h:8002", "h2:8002")


CRIT = dict(GROUP, severity="critical")
WARN = dict(GROUP, severity="warning")
SCENARIOS = {
    "VllmEngineUnhealthy": [{
        "input_series": [{"series": f"{names.ENGINE_HEALTHY}{{{LABELS}}}", "values": "1 1 0 0 0 0"},
                         {"series": f'{names.ENGINE_HEALTHY}{{{LABELS.replace("m_0_0", "m_0_1")}}}',
                          "values": "1 1 1 1 1 1"}],
        "alert_rule_test": [quiet("VllmEngineUnhealthy", "1m"), quiet("VllmEngineUnhealthy", "2m"),
                            fired("VllmEngineUnhealthy", "3m", CRIT)]}],
    "VllmEngineCrashLoop": [{
        "input_series": [{"series": f"{names.ENGINE_RESTARTS}{{{LABELS}}}", "values": "0 0 1 1 2 2 3 3 3 3"},
                         {"series": f'{names.ENGINE_RESTARTS}{{{LABELS.replace("m_0_0", "m_0_1")}}}',
                          "values": "0 0 1 1 2 2 2 2 2 2"}],
        # the third restart within the hour (at 6m) pages at once; two restarts never do
        "alert_rule_test": [quiet("VllmEngineCrashLoop", "5m"), fired("VllmEngineCrashLoop", "6m", CRIT)]}],
    # promtool's clock starts at Unix time 0: a timestamp series "0+60x10" keeps up with time(), "60x10" froze.
    "VllmEngineStalled": [
        {  # health monitor off (no healthy series): requests in flight, no progress since t=60 s: 120 s old at 3m
           # (not over), 180 s at 4m, firing at 5m; an idle instance's timestamp keeps up (each publish is progress)
            "input_series": [
                {"series": f"{names.ENGINE_LAST_PROGRESS_TIMESTAMP}{{{LABELS}}}", "values": "0 60x10"},
                {"series": f'{names.ENGINE_LAST_PROGRESS_TIMESTAMP}{{{LABELS.replace("m_0_0", "idle")}}}',
                 "values": "0+60x10"}],
            "alert_rule_test": [quiet("VllmEngineStalled", "3m"), quiet("VllmEngineStalled", "4m"),
                                fired("VllmEngineStalled", "5m", CRIT)]},
        {  # a wedged stub: healthy and idle, as last published, but its progress timestamp stopped at t=60 s;
           # a live instance's keeps up, and one being restarted (healthy 0) is VllmEngineUnhealthy's
            "input_series": [
                {"series": f"{names.ENGINE_HEALTHY}{{{LABELS}}}", "values": "1x10"},
                {"series": f"{names.ENGINE_LAST_PROGRESS_TIMESTAMP}{{{LABELS}}}", "values": "0 60x10"},
                {"series": f'{names.ENGINE_HEALTHY}{{{LABELS.replace("m_0_0", "live")}}}', "values": "1x10"},
                {"series": f'{names.ENGINE_LAST_PROGRESS_TIMESTAMP}{{{LABELS.replace("m_0_0", "live")}}}',
                 "values": "0+60x10"},
                {"series": f'{names.ENGINE_HEALTHY}{{{LABELS.replace("m_0_0", "restarting")}}}', "values": "0x10"},
                {"series": f'{names.ENGINE_LAST_PROGRESS_TIMESTAMP}{{{LABELS.replace("m_0_0", "restarting")}}}',
                 "values": "0x10"}],
            "alert_rule_test": [quiet("VllmEngineStalled", "4m"), fired("VllmEngineStalled", "5m", CRIT)]}],
    "VllmMetricsAbsent": [{
        "input_series": [{"series": 'up{job="triton", instance="a:8002"}', "values": "1x10"},
                         {"series": 'up{job="triton", instance="b:8002"}', "values": "1x10"},
                         {"series": f'{names.VLLM_RUNNING}{{job="triton", instance="b:8002", model="m"}}',
                          "values": "0x10"}],
        "alert_rule_test": [quiet("VllmMetricsAbsent", "4m"),
                            fired("VllmMetricsAbsent", "5m", {"job": "triton", "instance": "a:8002",
                                                              "severity": "warning"})]}],
    "TritonTargetDown": [{
        "input_series": [{"series": 'up{job="triton", instance="a:8002"}', "values": "0x10"},
                         {"series": 'up{job="triton", instance="b:8002"}', "values": "1x10"}],
        "alert_rule_test": [quiet("TritonTargetDown", "4m"),
                            fired("TritonTargetDown", "5m", {"job": "triton", "instance": "a:8002",
                                                             "severity": "critical"})]}],
    "VllmHighErrorRatio": [
        {  # 2 failed per 100 answered: warning (> 1 %) only; bad input and cancellations are not server errors
            "input_series": [outcome("completed", 98), outcome("failed", 2), outcome("rejected", 50),
                             outcome("cancelled", 50)],
            "alert_rule_test": [quiet("VllmHighErrorRatio", "9m"),
                                fired("VllmHighErrorRatio", "12m", {**FLEET, "severity": "warning"})]},
        {  # a fleet of two replicas: 4 % failed on one, none on the other → 2 % of the model's requests, one alert
           # for the model (no instance label)
            "input_series": [outcome("completed", 96), outcome("failed", 4),
                             outcome("completed", 100, REPLICA_2)],
            "alert_rule_test": [fired("VllmHighErrorRatio", "12m", {**FLEET, "severity": "warning"})]},
        {  # half the requests fail, but 10 in 5m is under the minimum traffic (20): an idle model does not page
            "input_series": [outcome("completed", 1), outcome("failed", 1)],
            "alert_rule_test": [quiet("VllmHighErrorRatio", "25m")]},
        {  # 10 % refused by Triton before the backend saw them (queue full): critical after 2m
            "input_series": [outcome("completed", 90),
                             {"series": f'{names.TRITON_FAILURE}{{{LABELS}, reason="REJECTED"}}',
                              "values": "0+10x30"}],
            "alert_rule_test": [fired("VllmHighErrorRatio", "5m", {**FLEET, "severity": "critical"})]},
        {  # just under the threshold (0.9 %); Triton's BACKEND failures are the backend's own (already counted),
           # its OTHER and CANCELED ones the client's: none of them adds
            "input_series": [outcome("completed", 991), outcome("failed", 9), *(
                {"series": f'{names.TRITON_FAILURE}{{{LABELS}, reason="{reason}"}}', "values": "0+100x30"}
                for reason in ("BACKEND", "OTHER", "CANCELED"))],
            "alert_rule_test": [quiet("VllmHighErrorRatio", "25m")]}],
    "VllmKVCacheHigh": [{  # a completely full cache warns, and never pages
        "input_series": [{"series": f"{names.VLLM_KV_CACHE_USAGE}{{{VLLM}}}", "values": "0.92x60"},
                         {"series": f'{names.VLLM_KV_CACHE_USAGE}{{{VLLM.replace("m_0_0", "full")}}}',
                          "values": "1x60"},
                         {"series": f'{names.VLLM_KV_CACHE_USAGE}{{{VLLM.replace("m_0_0", "edge")}}}',
                          "values": "0.9x60"}],
        "alert_rule_test": [
            quiet("VllmKVCacheHigh", "9m"),
            fired("VllmKVCacheHigh", "10m", {**GROUP, "engine": "0", "severity": "warning"},
                  {**GROUP, "model_instance": "full", "engine": "0", "severity": "warning"}),
            fired("VllmKVCacheHigh", "60m", {**GROUP, "engine": "0", "severity": "warning"},
                  {**GROUP, "model_instance": "full", "engine": "0", "severity": "warning"})]}],
    "VllmRequestsQueueing": [{
        "input_series": [{"series": f"{names.VLLM_WAITING}{{{VLLM}}}", "values": "201x20"},
                         {"series": f'{names.VLLM_WAITING}{{{VLLM.replace("m_0_0", "edge")}}}',
                          "values": "50x20"},
                         {"series": f'{names.VLLM_WAITING}{{{VLLM.replace("m_0_0", "busy")}}}',
                          "values": "200x20"}],
        # over 50 warns after 5m, over 200 pages after 10m; 50 exactly never
        "alert_rule_test": [quiet("VllmRequestsQueueing", "4m"),
                            fired("VllmRequestsQueueing", "5m", WARN, {**WARN, "model_instance": "busy"}),
                            fired("VllmRequestsQueueing", "10m", WARN, {**WARN, "model_instance": "busy"}, CRIT)]}],
    "VllmHighPreemptionRate": [{
        "input_series": [{"series": f"{names.VLLM_PREEMPTIONS}{{{VLLM}}}", "values": "0+720x30"},
                         {"series": f'{names.VLLM_PREEMPTIONS}{{{VLLM.replace("m_0_0", "some")}}}',
                          "values": "0+120x30"},
                         {"series": f'{names.VLLM_PREEMPTIONS}{{{VLLM.replace("m_0_0", "edge")}}}',
                          "values": "0+54x30"}],
        # 12/s pages after 10m, 2/s only warns, 0.9/s is quiet
        "alert_rule_test": [quiet("VllmHighPreemptionRate", "3m"),
                            fired("VllmHighPreemptionRate", "10m", WARN, {**WARN, "model_instance": "some"}),
                            fired("VllmHighPreemptionRate", "20m", WARN, {**WARN, "model_instance": "some"},
                                  CRIT)]}],
    "VllmMetricsErrors": [{
        "input_series": [{"series": f'{names.METRICS_ERRORS}{{{LABELS},stage="record"}}',
                          "values": "0 0 0 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5"},
                         {"series": f'{names.METRICS_ERRORS}{{{LABELS.replace("m_0_0", "ok")},stage="record"}}',
                          "values": "0x25"}],
        # errors at 3m: pending while they are within the 10m window, firing after 5m, resolved once they left
        "alert_rule_test": [quiet("VllmMetricsErrors", "7m"),
                            fired("VllmMetricsErrors", "9m", {**WARN, "stage": "record"}),
                            quiet("VllmMetricsErrors", "14m")]}],
}
for _slo, _hist, _les in (("TTFT", names.VLLM_TTFT, ("2.5", "2.5")),
                          ("InterToken", names.VLLM_INTER_TOKEN_LATENCY, ("0.2", "0.2")),
                          ("EndToEnd", names.VLLM_E2E_LATENCY, ("60", "60.0"))):
    _name = f"Vllm{_slo}ErrorBudgetBurn"
    _le, _vllms_le = _les  # Triton's spelling of the bucket, and vLLM's (as Prometheus 3 stores either)
    SCENARIOS[_name] = [
        {"input_series": burn_series(_hist, _le, 80),  # 20 % bad: both fast-burn pages after their `for`
         "alert_rule_test": [fired(_name, "20m", burn("critical", "1h", "5m"), burn("critical", "6h", "30m"))]},
        {"input_series": burn_series(_hist, _vllms_le, 80),
         "alert_rule_test": [fired(_name, "20m", burn("critical", "1h", "5m"), burn("critical", "6h", "30m"))]},
        {"input_series": burn_series(_hist, _le, 88),  # 12 %: under 14.4 × 1 %, over 6 × 1 %
         "alert_rule_test": [fired(_name, "20m", burn("critical", "6h", "30m"))]},
        {"input_series": burn_series(_hist, _le, 100),  # every request within the SLO
         "alert_rule_test": [quiet(_name, "50m")]},
        {"input_series": [*burn_series(_hist, _le, 76),
                          *burn_series(_hist, _le, 100, VLLM.replace("h:8002", "h2:8002"))],
         # 24 % bad on one of two replicas: 12 % of the model's requests
         "alert_rule_test": [fired(_name, "20m", burn("critical", "6h", "30m"))]},
        {"input_series": burn_series(_hist, _le, 0, per_min=0.3),  # every request bad, 18 an hour: too few to page
         "alert_rule_test": [quiet(_name, "50m")]}]


def _clean(test: dict) -> dict:
    for case in test["alert_rule_test"]:
        for expected in case["exp_alerts"]:
            expected["exp_labels"] = {k: v for k, v in expected["exp_labels"].items() if v is not None}
    return {"interval": "1m", **test}


def test_every_alert_has_a_promtool_scenario():
    assert {r["alert"] for r in alert_rules()} == set(SCENARIOS)


# Other jobs' targets beside Triton's in one Prometheus: node-exporter down and up, another team's vLLM server
# under load, a dead engine of some other job. With the default selector no alert may fire for any of them; every
# scenario carries them.
OTHER_JOBS = [
    {"series": 'up{job="node", instance="n1:9100"}', "values": "0x2000"},
    {"series": 'up{job="node", instance="n2:9100"}', "values": "1x2000"},
    {"series": f'{names.VLLM_WAITING}{{job="vllm-serve", instance="v:8000", model_name="x", engine="0"}}',
     "values": "1000x2000"},
    {"series": f'{names.VLLM_KV_CACHE_USAGE}{{job="vllm-serve", instance="v:8000", model_name="x", engine="0"}}',
     "values": "1x2000"},
    {"series": f'{names.ENGINE_HEALTHY}{{job="lab", instance="l:8002", model="m", model_instance="m_0_0"}}',
     "values": "0x2000"},
]


def promtool_unit(groups: dict, scenarios: list[dict], tmp_path) -> subprocess.CompletedProcess[str]:
    groups = json.loads(json.dumps(groups))
    for group in groups["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
             "tests": [_clean(json.loads(json.dumps(t))) for t in scenarios]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests))
    return promtool("test", "rules", str(tmp_path / "test.yaml"))


@pytest.mark.parametrize("alert", sorted(SCENARIOS))
def test_promtool_unit(alert, tmp_path):
    scenarios = [{**t, "input_series": [*t["input_series"], *OTHER_JOBS]} for t in SCENARIOS[alert]]
    result = promtool_unit(yaml.safe_load(RULES.read_text()), scenarios, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_alert_fires_for_other_jobs_and_the_selector_is_what_prevents_it(tmp_path):
    from alerts.render import prometheus_groups
    from dashboards.build import panel_ids
    from observability.config import DEFAULT

    quiet_everywhere = [{"input_series": OTHER_JOBS, "alert_rule_test": [
        quiet(r["alert"], at) for r in alert_rules() for at in ("30m", "6h")]}]
    result = promtool_unit(yaml.safe_load(RULES.read_text()), quiet_everywhere, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    unselective = prometheus_groups(dataclasses.replace(DEFAULT, triton_selector=""), panel_ids())
    result = promtool_unit(unselective, quiet_everywhere, tmp_path)
    assert result.returncode != 0 and "TritonTargetDown" in result.stdout + result.stderr


def test_annotations_expand(tmp_path):
    shutil.copy(RULES, tmp_path / "rules.yaml")
    rule = next(r for r in alert_rules() if r["alert"] == "VllmEngineUnhealthy")
    expected = dict(rule["annotations"])
    expected["description"] = ("Engine of m_0_0 (m) on h:8002 has been unhealthy for 1m: requests fail with "
                               "UNAVAILABLE.")
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": f"{names.ENGINE_HEALTHY}{{{LABELS}}}", "values": "0x5"}],
        "alert_rule_test": [{"eval_time": "3m", "alertname": "VllmEngineUnhealthy",
                             "exp_alerts": [{"exp_labels": CRIT, "exp_annotations": expected}]}]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", str(tmp_path / "test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_group_declares_its_thresholds_and_one_config_replaces_them():
    """A group's own thresholds live in its module; a copy in Config.group_thresholds changes that group's rules and
    nothing else, and the SLO group records every window its (replaced) burn windows read."""
    from alerts.groups import alerts, engine_health, recording_rules, slo
    from observability.config import DEFAULT

    default = {a.name + a.severity: a for a in alerts(DEFAULT)}
    config = dataclasses.replace(DEFAULT, group_thresholds=(
        engine_health.Thresholds(stall_seconds=7, stall_for="2m"),
        slo.Thresholds(burn_windows=(slo.BurnWindow("critical", "4h", "10m", 10, "1m"),))))
    changed = {a.name + a.severity: a for a in alerts(config)}
    stalled = changed["VllmEngineStalledcritical"]
    assert "> 7)" in stalled.expr and stalled.for_ == "2m"
    assert "> 120)" in default["VllmEngineStalledcritical"].expr
    differ = {key for key in default.keys() | changed.keys() if default.get(key) != changed.get(key)}
    assert "VllmEngineStalledcritical" in differ
    assert {key for key in differ if not key.startswith(("VllmTTFT", "VllmInterToken", "VllmEndToEnd"))} == {
        "VllmEngineStalledcritical"}
    assert {r.record.rsplit("rate", 1)[1] for r in recording_rules(config)} == {"10m", "4h"}
    assert [r.record.rsplit("rate", 1)[1] for r in recording_rules(DEFAULT)][:7] == [
        "5m", "30m", "1h", "2h", "6h", "1d", "3d"]
