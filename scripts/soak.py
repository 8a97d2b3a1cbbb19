"""`make soak`: hours of production in minutes — mixed load, cancellations, bad requests and scrapes at once.

    python scripts/soak.py [--duration 600] [--output .soak/latest.json]
    python scripts/soak.py --attach HTTP_PORT GRPC_PORT METRICS_PORT --duration 40   (a running server)

Workers send streaming and non-streaming requests, cancel some (HTTP streams closed by the client, gRPC streams
cancelled), send a share of bad requests, while a scraper reads `:8002/metrics` every second and a sampler
records the RSS of every process of the server. Targets: 0 unexpected errors, RSS growth after warm-up < 5 %,
scrape p99 ≤ 50 ms, nothing in flight at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
from triton_launcher import ROOT, TritonServer, write_model  # noqa: E402

from vllm_triton_observable.metrics import names  # noqa: E402

MODEL = "vllm_model"
BAD = [  # (request body, the message the client must get)
    ({"sampling_parameters": "[" * 50_000}, "JSON nested too deeply"),
    ({"sampling_parameters": json.dumps({"max_tokenz": 3})}, "unknown sampling parameter"),
    ({"text_input": ""}, "text_input: is empty"),
    ({"sampling_parameters": json.dumps({"temperature": "nan"})}, "finite number"),
]


@dataclass
class Tally:
    outcomes: Counter = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str, problem: str | None = None) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            if problem is not None and len(self.unexpected) < 50:
                self.unexpected.append(problem)


class Load:
    def __init__(self, http: str, grpc: str, tally: Tally, seed: int) -> None:
        self.http, self.grpc, self.tally, self.rng = http, grpc, tally, random.Random(seed)

    def one(self) -> None:
        kind = self.rng.choices(["stream", "generate", "grpc_cancel", "http_cancel", "bad"],
                                [40, 25, 15, 10, 10])[0]
        try:
            getattr(self, kind)()
        except Exception as exc:
            self.tally.add("exception", f"{kind}: {type(exc).__name__}: {exc}")

    def _params(self) -> dict:
        return {"max_tokens": self.rng.randint(8, 64), "ignore_eos": True, "temperature": 0}

    def stream(self) -> None:
        body = {"text_input": "soak", "parameters": {**self._params(), "stream": True}}
        with requests.post(f"{self.http}/v2/models/{MODEL}/generate_stream", json=body, stream=True,
                           timeout=120) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith(b"data: ")]
        errors = [e["error"] for e in events if "error" in e]
        self.tally.add("completed", f"stream: {errors[0]}" if errors or not events else None)

    def generate(self) -> None:
        response = requests.post(f"{self.http}/v2/models/{MODEL}/generate", timeout=120,
                                 json={"text_input": "soak", "parameters": self._params()})
        self.tally.add("completed", None if response.ok else f"generate: {response.text[:200]}")

    def http_cancel(self) -> None:
        body = {"text_input": "soak", "parameters": {"max_tokens": 1000, "ignore_eos": True, "stream": True}}
        with requests.post(f"{self.http}/v2/models/{MODEL}/generate_stream", json=body, stream=True,
                           timeout=120) as response:
            for i, _ in enumerate(response.iter_lines()):
                if i >= self.rng.randint(0, 8):
                    break
        self.tally.add("cancelled")

    def grpc_cancel(self) -> None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc)
        try:
            inputs = []
            for name, array, dtype in (
                    ("text_input", np.array([b"soak"], dtype=object), "BYTES"),
                    ("stream", np.array([self.rng.random() < 0.5]), "BOOL"),
                    ("sampling_parameters", np.array([b'{"max_tokens": 1000, "ignore_eos": true}'], dtype=object),
                     "BYTES")):
                tensor = grpcclient.InferInput(name, [1], dtype)
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            client.start_stream(callback=lambda result, error: None)
            client.async_stream_infer(MODEL, inputs)
            time.sleep(self.rng.uniform(0, 0.6))
            client.stop_stream(cancel_requests=True)
        finally:
            client.close()
        self.tally.add("cancelled")

    def bad(self) -> None:
        body, message = self.rng.choice(BAD)
        response = requests.post(f"{self.http}/v2/models/{MODEL}/generate", timeout=30,
                                 json={"text_input": "soak", **body})
        ok = response.status_code == 400 and message in response.json().get("error", "")
        self.tally.add("rejected", None if ok else f"bad request: {response.status_code} {response.text[:200]}")


def scrape(url: str) -> tuple[float, dict]:
    started = time.monotonic()
    text = requests.get(url, timeout=10).text
    took = time.monotonic() - started
    return took, {f.name: f for f in text_string_to_metric_families(text)}


def metric(families: dict, name: str) -> float:
    return sum(s.value for f in families.values() for s in f.samples
               if s.name == name and s.labels.get("model") == MODEL)


def role(process: psutil.Process) -> str:
    cmdline = " ".join(process.cmdline())
    for marker, name in (("VLLM::EngineCore", "engine_core"), ("VLLM::Worker", "worker"),
                         ("triton_python_backend_stub", "stub"), ("tritonserver", "tritonserver")):
        if marker in cmdline:
            return name
    return "other"


def rss_by_role(server_pid: int) -> dict[str, float]:
    root = psutil.Process(server_pid)
    totals: Counter = Counter()
    for process in [root, *root.children(recursive=True)]:
        try:
            totals[role(process)] += process.memory_info().rss / 2**20
        except psutil.Error:
            continue
    return dict(totals)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(http_port: int, grpc_port: int, metrics_port: int, server_pid: int, duration: float,
        workers: int) -> dict:
    http, grpc, metrics_url = (f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}",
                               f"http://127.0.0.1:{metrics_port}/metrics")
    tally, stop = Tally(), threading.Event()
    scrapes: list[float] = []
    rss: list[tuple[float, dict[str, float]]] = []
    started = time.monotonic()

    def worker(seed: int) -> None:
        load = Load(http, grpc, tally, seed)
        while not stop.is_set():
            load.one()

    def scraper() -> None:
        while not stop.wait(1.0):
            try:
                scrapes.append(scrape(metrics_url)[0])
            except Exception as exc:
                tally.add("scrape_failed", f"scrape: {exc}")

    def sampler() -> None:
        interval = max(1.0, duration / 60)
        while True:
            rss.append((time.monotonic() - started, rss_by_role(server_pid)))
            if stop.wait(interval):
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    threads += [threading.Thread(target=scraper, daemon=True), threading.Thread(target=sampler, daemon=True)]
    for thread in threads:
        thread.start()
    while time.monotonic() - started < duration:
        time.sleep(1)
        print(f"\r[soak] {time.monotonic() - started:5.0f} / {duration:.0f} s  {dict(tally.outcomes)}",
              end="", flush=True)
    stop.set()
    for thread in threads:
        thread.join(180)
    print()
    inflight = float("nan")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        inflight = metric(scrape(metrics_url)[1], names.REQUESTS_IN_FLIGHT)
        if inflight == 0:
            break
        time.sleep(0.5)
    rss.append((time.monotonic() - started, rss_by_role(server_pid)))
    warm = next((sample for at, sample in rss if at >= duration * 0.2), rss[0][1])
    end = rss[-1][1]
    growth = (sum(end.values()) - sum(warm.values())) / sum(warm.values())
    return {
        "duration_s": duration, "workers": workers, "requests_by_outcome": dict(tally.outcomes),
        "unexpected_errors": tally.unexpected, "inflight_at_end": inflight,
        "scrape_ms": {"p50": 1000 * statistics.median(scrapes) if scrapes else None,
                      "p99": 1000 * pct(scrapes, 0.99) if scrapes else None, "count": len(scrapes)},
        "rss_mib": {"samples": [{"at_s": round(at, 1), **{k: round(v, 1) for k, v in s.items()}} for at, s in rss],
                    "after_warmup": warm, "end": end, "growth_after_warmup": growth},
    }


def verdict(report: dict) -> list[str]:
    """The targets a full run must meet; each miss as a sentence."""
    misses = []
    if report["unexpected_errors"]:
        misses.append(f"{len(report['unexpected_errors'])} unexpected error(s)")
    if report["rss_mib"]["growth_after_warmup"] >= 0.05:
        misses.append(f"RSS grew {report['rss_mib']['growth_after_warmup']:.1%} after warm-up (target < 5 %)")
    if (report["scrape_ms"]["p99"] or 0) > 50:
        misses.append(f"scrape p99 {report['scrape_ms']['p99']:.1f} ms (target ≤ 50 ms)")
    if report["inflight_at_end"] != 0:
        misses.append(f"{report['inflight_at_end']} request(s) in flight at the end")
    return misses


def summary(report: dict) -> str:
    rss = report["rss_mib"]
    lines = [f"soak: {report['duration_s']:.0f} s, {report['workers']} workers",
             f"  requests by outcome: {report['requests_by_outcome']}",
             f"  unexpected errors:   {len(report['unexpected_errors'])}",
             f"  scrape p50 / p99:    {report['scrape_ms']['p50']:.1f} / {report['scrape_ms']['p99']:.1f} ms",
             f"  in flight at end:    {report['inflight_at_end']:g}",
             "  RSS MiB after warm-up → end: " + ", ".join(
                 f"{k} {rss['after_warmup'].get(k, 0):.0f} → {v:.0f}" for k, v in sorted(rss["end"].items())),
             f"  RSS growth after warm-up: {rss['growth_after_warmup']:+.2%}"]
    misses = verdict(report)
    lines.append("  targets: " + ("all met" if not misses else "MISSED: " + "; ".join(misses)))
    lines.extend(f"  ! {problem}" for problem in report["unexpected_errors"][:10])
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--output", type=Path, default=ROOT / ".soak" / "latest.json")
    parser.add_argument("--attach", nargs=3, type=int, metavar=("HTTP", "GRPC", "METRICS"),
                        help="use a running server (its model vllm_model) instead of starting one")
    parser.add_argument("--server-pid", type=int, help="with --attach: tritonserver's pid, for RSS")
    args = parser.parse_args(argv)
    if args.attach:
        report = run(*args.attach, args.server_pid, args.duration, args.workers)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            write_model(Path(tmp), MODEL, params={"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true"})
            with TritonServer(Path(tmp)) as server:
                print(f"[soak] starting tritonserver (log: {server.log_path})", flush=True)
                server.wait_ready(timeout=900)
                report = run(server.http_port, server.grpc_port, server.metrics_port, server.process.pid,
                             args.duration, args.workers)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"[soak] wrote {args.output}")
    return 0 if not verdict(report) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
