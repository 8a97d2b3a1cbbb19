"""A real Prometheus (Debian's package) on loopback, scraping the test's tritonserver."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import requests
import yaml
from triton_launcher import free_port

from alerts.render import prometheus_groups
from dashboards.build import panel_ids
from observability.config import DEFAULT
from vllm_triton_observable.metrics.registry import triton_le_label


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str], rule_files: list[Path] = (),
                 interval: str = "1s") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": "triton", "static_configs": [{"targets": targets}]}],
            "rule_files": [str(p) for p in rule_files],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed (scripts/ensure_prometheus.sh installs it)"
        self.log = open(self.workdir / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            assert self.process.poll() is None, (self.workdir / "prometheus.log").read_text()
            time.sleep(0.2)
        raise AssertionError("prometheus did not become ready")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query, now or at Unix time `at` (queries compared with each other need one time)."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        answer = requests.get(f"{self.url}/api/v1/query", params=params, timeout=30).json()
        assert answer["status"] == "success", f"{expr}: {answer}"
        return answer["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        return requests.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]

    def wait_for_scrapes(self, n: int = 3) -> None:
        """Until the target has been scraped successfully `n` times."""
        wait = time.monotonic() + 60
        while time.monotonic() < wait:
            result = self.query("count_over_time(up[1m])")
            if result and float(result[0]["value"][1]) >= n and self.query("up == 1"):
                return
            time.sleep(0.5)
        raise AssertionError("no successful scrapes")


def substitute(expr: str, rate_interval: str = "1m") -> str:
    """A dashboard query with its variables set as a default dashboard shows it (every job, instance, model)."""
    values = {"__rate_interval": rate_interval, "job": ".*", "instance": ".*", "model": ".*", "engine": ".*"}
    values |= {f"slo_{slo.name.lower()}": triton_le_label(slo.threshold_s) for slo in DEFAULT.slos}
    return re.sub(r"\$(\w+)", lambda m: values[m.group(1)], expr)


def generated_rules(tmp_path: Path, **shorter: object) -> Path:
    """The generated Prometheus rules, with the config fields in `shorter` (e.g. a `for`) changed for a test."""
    config = dataclasses.replace(DEFAULT, **shorter)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_groups(config, panel_ids(config))))
    return rules
