"""A fleet: two tritonservers with the tiny model, scraped by one real Prometheus loaded with the generated rules.

After a scripted workload with known counts, the overview dashboard's panels are evaluated as Grafana would (its
variables at All) and their *values* checked: the fleet request rate integrates to the requests sent, the output
token rate to the responses' `num_output_tokens`, the fleet tiles equal the sum of the per-replica panels,
in-flight and running are 0 at rest, the error ratio is 0; a fleet SLO burn fires once for the model, not per
replica. Then one replica's engine dies and the per-replica alert fires for that replica only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time

import pytest
from helpers import BASE_ENGINE, ROOT, engine_of, generate, generate_stream, server_env, stub_of, wait_until
from prometheus_server import Prometheus, generated_rules, substitute
from triton_launcher import TritonServer, write_model

from alerts.groups import engine_health, slo
from observability.config import DEFAULT
from vllm_triton_observable.metrics import names

MODEL = "vllm_model"
OVERVIEW = json.loads((ROOT / "dashboards" / "generated" / "vllm-triton-overview.json").read_text())
# requests per replica: (max_tokens, stream) each; ignore_eos makes every answer exactly max_tokens long
WORKLOAD = {0: [(5, False), (7, True), (3, False), (9, True), (4, False), (6, False)],
            1: [(8, True), (2, False), (5, False), (11, True)]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    repo = tmp_path_factory.mktemp("fleet_repository")
    # fail: a dead engine stays unhealthy (no restart), so the per-replica alert can be watched
    write_model(repo, MODEL, BASE_ENGINE, params={"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true",
                                                  "HEALTH_RECOVERY": "fail"})
    servers = [TritonServer(repo, env=server_env(),
                            extra_args=[f"--backend-config=python,shm-region-prefix-name=fleet{i}_{os.getpid()}_"])
               for i in range(2)]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready(timeout=600)
        yield servers
    finally:
        for server in servers:
            server.stop()


def panel_targets(title: str) -> list[str]:
    (panel,) = [p for p in OVERVIEW["panels"] if p["title"] == title]
    return [t["expr"] for t in panel["targets"]]


def evaluate(prometheus: Prometheus, title: str, window_s: int, at: float) -> dict[str, float]:
    """A panel's series at Unix time `at`, instance (or "" for a fleet total) → value, its rate window covering the
    workload."""
    values = {}
    for expr in panel_targets(title):
        for series in prometheus.query(substitute(expr, rate_interval=f"{window_s}s"), at=at):
            key = series["metric"].get("instance", "")
            values[key] = values.get(key, 0.0) + float(series["value"][1])
    return values


def send(server, max_tokens: int, stream: bool) -> int:
    body = {"text_input": f"Fleet request of {max_tokens} tokens", "return_num_output_tokens": True,
            "parameters": {"max_tokens": max_tokens, "ignore_eos": True, "stream": stream}}
    if stream:
        return sum(event["num_output_tokens"] for event in generate_stream(server, MODEL, body))
    status, answer = generate(server, MODEL, body)
    assert status == 200, answer
    return answer["num_output_tokens"]


def test_a_two_replica_fleet_shows_true_values_and_a_fault_pages_for_its_replica_only(fleet, tmp_path):
    # Rules as generated, with test-sized knobs: a TTFT SLO at vLLM's smallest bucket (1 ms, which every request
    # misses) and a fast-burn window without `for`, so the fleet's SLO burns; unhealthy after 1 s.
    ttft = dataclasses.replace(DEFAULT.slos[0], threshold_s=DEFAULT.slos[0].buckets[0])
    rules = generated_rules(tmp_path, slos=(ttft,), min_requests=5, group_thresholds=(
        engine_health.Thresholds(unhealthy_for="1s"),
        slo.Thresholds(burn_windows=(slo.BurnWindow("critical", "1h", "5m", 14.4, "0s"),))))
    targets = [f"127.0.0.1:{server.metrics_port}" for server in fleet]
    with Prometheus(tmp_path, targets, [rules]) as prometheus:
        began = time.monotonic()
        prometheus.wait_for_scrapes(3)  # every counter is scraped at 0 first: rate() extrapolates nothing before
        tokens = {i: sum(send(fleet[i], n, stream) for n, stream in WORKLOAD[i]) for i in WORKLOAD}
        assert tokens == {i: sum(n for n, _ in WORKLOAD[i]) for i in WORKLOAD}  # the responses say so too
        # The backend publishes every second, Prometheus scrapes every second; rate() extrapolates past the last
        # sample by up to a scrape interval, so a window of 30 s or more keeps that within a few per cent.
        time.sleep(max(3.5, 30 - (time.monotonic() - began)))
        window = int(time.monotonic() - began) + 5  # the whole life of the series
        at = time.time()  # every panel evaluated at one time, as a dashboard refresh does

        requests_sent = sum(len(w) for w in WORKLOAD.values())
        fleet_rate = evaluate(prometheus, "Requests/s", window, at)[""]
        assert fleet_rate * window == pytest.approx(requests_sent, rel=0.06), fleet_rate
        by_replica = evaluate(prometheus, "Requests/s by replica", window, at)
        assert {instance: round(rate * window) for instance, rate in by_replica.items()} == {
            targets[i]: len(WORKLOAD[i]) for i in WORKLOAD}
        assert sum(by_replica.values()) == pytest.approx(fleet_rate, rel=1e-9)  # the fleet is the sum of replicas
        exact = prometheus.query(f"sum({names.VLLM_GENERATION_TOKENS})", at=at)
        assert float(exact[0]["value"][1]) == sum(tokens.values())
        output_rate = prometheus.query(substitute(panel_targets("Tokens/s")[1], rate_interval=f"{window}s"), at=at)
        assert float(output_rate[0]["value"][1]) * window == pytest.approx(sum(tokens.values()), rel=0.06)
        assert evaluate(prometheus, "Error ratio", window, at)[""] == 0
        assert set(evaluate(prometheus, "Error ratio by replica", window, at).values()) == {0.0}
        assert evaluate(prometheus, "Running and waiting requests", window, at) == {"": 0.0}
        assert float(prometheus.query(f"sum({names.REQUESTS_IN_FLIGHT})", at=at)[0]["value"][1]) == 0

        def burning() -> list[dict]:
            return [a for a in prometheus.alerts()
                    if a["labels"]["alertname"] == f"Vllm{ttft.name}ErrorBudgetBurn" and a["state"] == "firing"]

        wait_until(burning, timeout=30, interval=0.5)
        (burn,) = burning()  # one alert for the model over both replicas (6 + 4 requests, guard 5), no instance
        assert {k: burn["labels"].get(k) for k in ("job", "model", "instance")} == {
            "job": "triton", "model": MODEL, "instance": None}

        core, _ = engine_of(stub_of(fleet[1], MODEL))
        os.kill(core.pid, signal.SIGKILL)

        def unhealthy() -> list[dict]:
            return [a for a in prometheus.alerts() if a["labels"]["alertname"] == "VllmEngineUnhealthy"
                    and a["state"] == "firing"]

        wait_until(lambda: unhealthy(), timeout=30, interval=0.5)
        time.sleep(2)  # a wrong alert for the other replica would have fired by now too
        assert {a["labels"]["instance"] for a in unhealthy()} == {targets[1]}
        assert not [a for a in prometheus.alerts() if a["labels"].get("instance") == targets[0]]
