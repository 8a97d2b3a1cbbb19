"""A short smoke run of `make bench` over vllm serve and Triton's HTTP (SSE), gRPC, traced and untraced-beside-it
paths, swept over 1 and 2 streams: it completes, draws the plot, every stream receives all its tokens, the JSON has
the ratios, the CPU per process role and each engine's own pace, and the traced configuration's spans are delivered
(Triton's and the SDK's exports reach the sink, its server counts none dropped). Figures are not asserted."""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


def test_bench_smoke_run_writes_json(tmp_path):
    output, plot = tmp_path / "bench.json", tmp_path / "sweep.png"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--configs", "v,h,c,e,f", "--rounds", "1",
         "--warmup", "0", "--sweep", "1,2", "--tokens", "4", "--output", str(output), "--plot", str(plot),
         "--engine-args", '{"stream_interval": 1}'],  # vLLM's default, passed to every configuration
        capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "did not stop cleanly" not in result.stdout, result.stdout[-3000:]  # every server unloaded its engines
    for row in ("v: vllm serve, HTTP SSE", "h: Triton HTTP SSE, metrics on", "c: Triton, metrics on",
                "e: Triton, metrics + tracing", "f: Triton, metrics, untraced beside e"):
        assert f"| {row} |" in result.stdout, result.stdout[-3000:]
    report = json.loads(output.read_text())
    assert set(report["ratios"]) >= {"triton_over_direct", "metrics_on_over_off", "health_on_over_off",
                                     "ttft_p50_overhead_ms", "scrape_p99_ms", "tracing_on_over_off",
                                     "triton_http_over_vllm_serve", "triton_grpc_over_vllm_serve"}
    for key in ("v", "h", "c", "e", "f"):
        measured = report["results"][key]
        assert measured["tokens_per_s"]["median"] > 0 and measured["errors"] == 0, key
        # every stream got all its tokens: 2 requests × 4 tokens per round
        assert [r["tokens"] for r in measured["rounds"]] == [8], key
        # the round split at its last first token
        (round_,) = measured["rounds"]
        assert round_["last_first_token_s"] == max(round_["ttft"]) < round_["seconds"], key
        # of the inter-token gaps, a round keeps its percentiles (the gaps themselves made the JSON too large)
        assert "itl" not in round_ and 0 < round_["itl_p50_ms"] <= round_["itl_p99_ms"], key
        assert measured["after_last_first_token_ms"]["median"] == pytest.approx(
            measured["round_ms"]["median"] - measured["last_first_token_ms"]["median"]), key
        # the engine's own pace (vLLM's decode times of the round's requests) and the tokens per response
        assert measured["engine_step_ms"]["median"] > 0 and measured["tokens_per_response"]["median"] >= 1, key
    for key in ("h", "c", "e", "f"):  # metrics on: the publisher's cost in the round, once it had caught up
        publish = report["results"][key]["publish"]
        assert publish["calls_per_s"]["median"] > 0 and publish["catch_up_s"]["median"] >= 0, key
        assert 0 <= publish["threads_behind"]["median"] <= 1, key  # one response thread: behind at most all along
    assert report["results"]["v"]["publish"] == {} and "threads behind" in result.stdout
    assert report["results"]["v"]["cpu_ms_per_token_by_role"].keys() >= {"client", "API server"}
    assert report["results"]["h"]["cpu_ms_per_token_by_role"].keys() >= {"client", "stub", "tritonserver"}
    assert report["ratios"]["triton_http_over_vllm_serve"] > 0 and report["ratios"]["ttft_p50_overhead_ms"] is not None
    assert report["ratios"]["tracing_on_over_off"] > 0 and report["trace_spans_dropped"] == 0
    # Triton traces only requests with a traceparent (rate=0) and exports them as JSON: e's were traced; the SDK's
    # exporters (the backend's, vLLM's) post protobuf to the same sink
    assert report["trace_exports"].get("application/x-protobuf", 0) > 0
    # each of e's 3 traced requests: its backend span arrived, and vLLM's (vLLM's processes add start-up spans),
    # those Triton's gRPC frontend did not trace too (3 spans each where it did; the header is forwarded to the model)
    spans = report["trace_spans_by_service"]
    assert spans.get("vllm-triton-backend") == 3 and spans.get("vllm", 0) >= 3, spans
    assert spans.get("triton-inference-server", 0) in (0, 3, 6, 9), spans
    assert (report["trace_exports"].get("application/json", 0) > 0) == (spans.get("triton-inference-server", 0) > 0)
    assert report["ratios"]["scrape_p99_ms"] > 0
    paired = report["paired_ratios"]["triton_http_over_vllm_serve"]  # round by round, with its interval
    assert len(paired["rounds"]) == 1 and paired["ci95"][0] <= paired["median"] <= paired["ci95"][1]
    decoding = report["paired_ratios"]["triton_http_over_vllm_serve_decoding"]  # the same after the starts
    h, v = (report["results"][k]["rounds"][0] for k in ("h", "v"))
    assert decoding["rounds"] == [pytest.approx((v["seconds"] - v["last_first_token_s"])
                                                / (h["seconds"] - h["last_first_token_s"]))]
    assert "triton_http_over_vllm_serve_decoding" in result.stdout and "to the last first token" in result.stdout
    traced_later = report["paired_ttft_p50_delta_ms"]["tracing_on_over_off"]  # e − f's first tokens, in ms
    e, f = (report["results"][k]["rounds"][0] for k in ("e", "f"))
    later_ms = 1000 * (statistics.median(e["ttft"]) - statistics.median(f["ttft"]))
    assert traced_later["rounds"] == [pytest.approx(later_ms)]
    assert traced_later["later"] == (traced_later["rounds"][0] > 0) and "later in" in result.stdout
    assert "Round by round" in result.stdout and report["workload"]["engine"]["stream_interval"] == 1
    assert report["machine"]["cores"] >= 1 and report["workload"]["concurrency"] == 2
    # the sweep: each level's results and ratios, and the plot
    assert set(report["sweep"]) == {"1", "2"} and set(report["sweep"]["1"]["results"]) == {"v", "h", "c", "e", "f"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_a_failing_configuration_stops_the_benchmark_and_every_server(tmp_path):
    """As on the GPU host, where the gRPC client's module was missing: the run ends at the failure with the error
    shown and a non-zero exit, and no server it started is left running (it once hung for minutes with them up)."""
    import shutil
    import tempfile
    import time

    import psutil

    # the benchmark's repositories, and so vLLM's IPC sockets, go under TMPDIR: a short one (a socket path may have
    # 107 characters at most)
    short = Path(tempfile.mkdtemp(prefix="bf-", dir="/tmp"))
    shadow = tmp_path / "shadow" / "tritonclient"
    (shadow / "grpc").mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "grpc" / "__init__.py").write_text("raise ImportError('tritonclient.grpc hidden by the test')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow"), "TMPDIR": str(short)}
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "bench.py"), "--configs", "h,c", "--rounds", "2", "--warmup", "0",
             "--tokens", "4", "--concurrency", "2", "--output", str(tmp_path / "bench.json")],
            capture_output=True, text=True, timeout=600, env=env)
        ended = time.monotonic()
        left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(short) in " ".join(p.info["cmdline"] or [])]
    finally:
        shutil.rmtree(short, ignore_errors=True)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "tritonclient.grpc hidden by the test" in output and "every server it started is stopped" in output
    assert "h (Triton HTTP SSE, metrics on)" in output  # the configuration before it ran
    assert not (tmp_path / "bench.json").exists()
    assert not left, f"still running {time.monotonic() - ended:.1f} s after the benchmark ended: {left}"


def test_the_cost_of_one_triton_metric_call_is_measured(tmp_path):
    """scripts/metric_call_cost.py on a real tritonserver: every kind of call timed, and timed beside a spinner."""
    output = tmp_path / "cost.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "metric_call_cost.py"), "--calls", "200",
                             "--output", str(output)],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    for call in ("histogram observe", "counter increment", "gauge set", "gauge increment"):
        assert report[call]["wall_us"] > 0 and report[call]["cpu_us"] > 0 and report[call]["spinner_rate_vs_idle"] > 0


def test_the_cost_of_the_stat_loggers_record_is_measured(tmp_path):
    """scripts/record_cost.py: vLLM's logger and this backend's each record every step given (the script checks
    their inter-token latency counts), timed per step and per token."""
    output = tmp_path / "record.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "record_cost.py"), "--streams", "2,8",
                             "--steps", "3", "--repeat", "2", "--output", str(output)],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    for streams in ("2", "8"):
        for logger in ("vllm", "backend"):
            measured = report[streams][logger]
            assert measured["us_per_step"] > 0 and measured["us_per_token"] > 0, (streams, logger)
