"""A short smoke run of `make soak` against the shared server: mixed load, cancellations, bad requests and
scrapes at once end with no unexpected error and nothing in flight (the full run's figures: docs/benchmarks.md)."""

import json
import os
import subprocess
import sys

from helpers import ROOT


def test_soak_smoke_run(server, tmp_path):
    output = tmp_path / "soak.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "soak.py"), "--duration", "30", "--workers", "4",
         "--attach", str(server.http_port), str(server.grpc_port), str(server.metrics_port),
         "--server-pid", str(server.process.pid), "--output", str(output)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert output.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["unexpected_errors"] == [], result.stdout[-3000:]
    assert report["inflight_at_end"] == 0
    outcomes = report["requests_by_outcome"]
    assert outcomes.get("completed", 0) > 10 and outcomes.get("cancelled", 0) > 0 and outcomes.get("rejected", 0) > 0
    assert report["scrape_ms"]["count"] >= 20 and report["scrape_ms"]["p99"] <= 200
    assert {"tritonserver", "stub", "engine_core", "worker"} <= set(report["rss_mib"]["end"])
    assert "targets:" in result.stdout
