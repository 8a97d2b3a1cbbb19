"""A short smoke run of `make bench`: it completes and writes well-formed JSON (figures are not asserted), with the
traced configuration's spans delivered (its server counts none dropped)."""

import json
import os
import subprocess
import sys

from helpers import ROOT


def test_bench_smoke_run_writes_json(tmp_path):
    output = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--configs", "c,e", "--rounds", "1", "--warmup", "0",
         "--concurrency", "2", "--tokens", "4", "--output", str(output)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| c: Triton, metrics on |" in result.stdout and "| e: Triton, metrics + tracing |" in result.stdout
    report = json.loads(output.read_text())
    assert set(report["ratios"]) >= {"triton_over_direct", "metrics_on_over_off", "health_on_over_off",
                                     "ttft_p50_overhead_ms", "scrape_p99_ms", "tracing_on_over_off"}
    for key in ("c", "e"):
        assert report["results"][key]["tokens_per_s"]["median"] > 0 and report["results"][key]["errors"] == 0
    assert report["ratios"]["tracing_on_over_off"] > 0 and report["trace_spans_dropped"] == 0
    assert report["ratios"]["scrape_p99_ms"] > 0
    assert report["machine"]["cores"] >= 1 and report["workload"]["concurrency"] == 2
