"""The Kubernetes wiring (deploy/kubernetes, a kustomize base): generated from the config, the core kinds valid
against Kubernetes' own schemas (kubernetes-validate), the Prometheus operator's custom resources carrying the
fields it requires, and every piece pointing at the others: the ServiceMonitor selects the Service and scrapes its
metrics port, the job it gives the targets is one the rules select, the rules are the generated ones, the
dashboards are the generated ones, labelled for Grafana's sidecar."""

from __future__ import annotations

import json
import re

import kubernetes_validate
import pytest
import yaml
from helpers import ROOT

from alerts.render import prometheus_groups
from dashboards.build import panel_ids
from observability.config import DEFAULT

BASE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.31.0"  # the schemas kubernetes-validate ships for it
ANNOTATION_LIMIT = 262144  # kubectl apply keeps the whole object in an annotation of at most 256 KiB


def resources() -> list[dict]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    assert set(kustomization["resources"]) | {"kustomization.yaml"} == {p.name for p in BASE.iterdir()}
    return [doc for name in kustomization["resources"] for doc in yaml.safe_load_all((BASE / name).read_text())]


def of_kind(kind: str) -> list[dict]:
    return [doc for doc in resources() if doc["kind"] == kind]


def test_generated_files_are_up_to_date():
    from deploy.build import main

    assert main(["--check"]) == 0, "run `make kubernetes`"


@pytest.mark.parametrize("doc", [d for d in resources() if d["apiVersion"] == "v1"],
                         ids=lambda d: f'{d["kind"]}/{d["metadata"]["name"]}')
def test_core_kinds_are_valid_kubernetes(doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert len(json.dumps(doc)) < ANNOTATION_LIMIT


def test_the_service_monitor_scrapes_the_services_metrics_port_as_a_job_the_rules_select():
    (service,) = of_kind("Service")
    (monitor,) = of_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["name"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert ports[endpoint["port"]] == 8002 and endpoint["path"] == "/metrics"
    assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
    # The operator names the job after the Service (no jobLabel set): the rules' selector must match it.
    assert "jobLabel" not in monitor["spec"]
    job_regex = re.fullmatch(r'job=~"(.*)"', DEFAULT.triton_selector).group(1)
    assert re.fullmatch(job_regex, service["metadata"]["name"])


def test_the_prometheus_rule_is_the_generated_rules():
    (rule,) = of_kind("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["name"]
    assert rule["metadata"]["labels"] == dict(DEFAULT.prometheus_rule_labels)
    assert rule["spec"] == prometheus_groups(DEFAULT, panel_ids())
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        for r in group["rules"]:
            assert ("record" in r) != ("alert" in r) and r["expr"]


def test_the_dashboards_are_the_generated_ones_labelled_for_grafanas_sidecar():
    maps = of_kind("ConfigMap")
    key, value = DEFAULT.grafana_dashboard_label
    generated = {p.name: p.read_text() for p in (ROOT / "dashboards" / "generated").glob("*.json")}
    assert all(m["metadata"]["labels"] == {key: value} for m in maps)
    assert {name: text for m in maps for name, text in m["data"].items()} == generated
