"""make timeline: where a first token's time goes, request by request, when N streams start at once.

Every request carries a new W3C `traceparent`. tritonserver runs in OpenTelemetry mode with `rate=0` (it traces
exactly those requests), the backend and vLLM trace them too, and all three export to an OTLP receiver in a process
of its own (scripts/otlp_receiver.py). The client notes, in wall-clock nanoseconds, when it sent each request and
when its first token arrived. Per request, every timestamp of its trace up to that first token is placed on one
axis that starts at the client's send:
  * Triton's own span events (level TIMESTAMPS: the request's start, its queue, the model's compute start, …),
  * the backend span: its start (`execute()` took the request) and its events ("submitted to the engine",
    "first token", "first response sent"),
  * vLLM's `llm_request`: the request's arrival in the engine client (the span's start), its first scheduling
    (+ `gen_ai.latency.time_in_queue`) and its first token (+ `gen_ai.latency.time_to_first_token`),
  * the client's first token.
With --vllm-serve the same workload goes to `vllm serve` too (its API server exports the same `llm_request`), on the
same axis; with --configs h,r to one model per `make bench` configuration (h: one instance; r: four instances
sharing one engine with batched admission; p: four response threads, …), all on the one tritonserver; with --grpc
to each of those models over gRPC streaming as well (Triton's `GRPC_*` timestamps in place of `HTTP_*`). Rounds
alternate their order. Prints, per step, the median time from the client's send (p10–p90)
and the median step to step; JSON to .bench/timeline.json. Tracing is on for every request measured here, so the
absolute figures include its per-request cost; the steps are what the timeline is for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import bench  # noqa: E402
from triton_launcher import TritonServer, free_port  # noqa: E402

from vllm_triton_observable.metrics import names  # noqa: E402

VLLM_SPAN = "llm_request"  # vLLM's span, whichever service name its process has (vllm serve sets none)
# A step after the client's first token is not on its path, except this one: send() returns once Triton has taken
# the response, often after the client already has it.
AFTER_THE_CLIENT = {"backend: first response sent"}
SKEW_NS = 5_000_000  # a timestamp this far before the client's send is not this request's (Triton writes some so)
# A trace's services where Triton's gRPC frontend lost the request's context: the backend's and vLLM's
WITHOUT_TRITON = 2
CLIENT_SENT, CLIENT_FIRST = "client: request sent", "client: first token received"
# Triton configurations a timeline can serve: HTTP clients on one plain tritonserver (k needs a server of its own)
TIMED = bench.HTTP_CLIENT - bench.FORKED


@dataclass
class Sent:
    """One request as the client saw it."""

    target: str  # a Triton configuration ("h: Triton HTTP SSE, metrics on", "h's model over gRPC", …) or "vllm serve"
    trace_id: str
    sent_ns: int
    first_ns: int = 0


async def stream_round(url: str, body: Any, concurrency: int, target: str, tokens_in: Any) -> list[Sent]:
    """N streams started at once on the run's HTTP session (bench.http_session: connections open from the round
    before), each with its own trace."""
    sent: list[Sent] = []
    session = bench.http_session()

    async def one(i: int) -> None:
        headers = bench.traceparent()
        record = Sent(target, headers["traceparent"].split("-")[1], time.time_ns())
        async with session.post(url, json=body(i), headers=headers) as response:
            if response.status != 200:
                return
            state: dict = {}
            async for line in response.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                if tokens_in(json.loads(line[6:]), state) and not record.first_ns:
                    record.first_ns = time.time_ns()
        sent.append(record)

    await asyncio.gather(*(one(i) for i in range(concurrency)))
    return [s for s in sent if s.first_ns]


async def grpc_round(server: TritonServer, model: str, batched: bool, target: str, concurrency: int,
                     tokens: int) -> list[Sent]:
    """N gRPC streams (tritonclient's asyncio client, as make bench's gRPC configurations; its channel open before
    the send) started at once, each with its own trace in its metadata."""
    import tritonclient.grpc.aio as aioclient

    sent: list[Sent] = []
    client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    await client.is_model_ready(model)

    async def one(i: int) -> None:
        async def request():
            yield {"model_name": model, "inputs": bench.grpc_inputs(i, tokens, batched), "request_id": str(i)}

        headers = bench.traceparent()
        record = Sent(target, headers["traceparent"].split("-")[1], time.time_ns())
        # read to the stream's end, as make bench does (a client that cancels trips tritonserver 2.51's frontend)
        async for result, error in client.stream_infer(request(), headers=headers):
            if error is None and not record.first_ns and int(result.as_numpy("num_output_tokens").flat[0]):
                record.first_ns = time.time_ns()
        sent.append(record)

    try:
        await asyncio.gather(*(one(i) for i in range(concurrency)))
    finally:
        await client.close()
    return [s for s in sent if s.first_ns]


def triton_round(server: TritonServer, model: str, target: str, concurrency: int, tokens: int) -> Any:
    def body(i: int) -> dict:
        return {"text_input": bench.prompt(i), "return_num_output_tokens": True,
                "parameters": {"max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": True}}

    return stream_round(f"{server.http_url}/v2/models/{model}/generate_stream", body, concurrency, target,
                        lambda event, _: int(event.get("num_output_tokens", 0)))


def vllm_serve_round(server: bench.VllmServe, concurrency: int, tokens: int) -> Any:
    def body(i: int) -> dict:
        return {"model": bench.ENGINE["model"], "prompt": bench.prompt(i), "max_tokens": tokens,
                "ignore_eos": True, "temperature": 0, "stream": True}

    return stream_round(f"{server.url}/v1/completions", body, concurrency, "vllm serve",
                        lambda event, _: bool(event.get("choices") and event["choices"][0].get("text")))


def steps_of(request: Sent, spans: list[dict[str, Any]]) -> dict[str, int]:
    """Every timestamp of one request's trace, in ns after the client sent it, up to its first token."""
    at: dict[str, int] = {CLIENT_SENT: 0, CLIENT_FIRST: request.first_ns - request.sent_ns}

    def note(name: str, ns: int) -> None:
        offset = ns - request.sent_ns
        if -SKEW_NS <= offset and (offset <= at[CLIENT_FIRST] or name in AFTER_THE_CLIENT) \
                and (name not in at or offset < at[name]):
            at[name] = offset  # an event seen several times (one per response) counts at its first

    for span in spans:
        if span["name"] == VLLM_SPAN:
            attributes = span["attributes"]
            note("vLLM: arrival (engine client)", span["start"])
            for attribute, name in (("gen_ai.latency.time_in_queue", "vLLM: first scheduled"),
                                    ("gen_ai.latency.time_to_first_token", "vLLM: first token")):
                if attributes.get(attribute) is not None:
                    note(name, span["start"] + int(float(attributes[attribute]) * 1e9))
        elif span["service"] == names.TRACE_SERVICE:
            note("backend: execute() took it", span["start"])
            for name, ns in span["event_times"]:
                note(f"backend: {name}", ns)
        else:
            for name, ns in span["event_times"]:
                note(f"triton: {name}", ns)
    return at


def summary(requests: list[Sent], spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per step: how many requests had it, median and p10 / p90 of its time after the send, in ms; sorted by
    median, with the step from the one before."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_trace.setdefault(span["trace_id"], []).append(span)
    offsets: dict[str, list[float]] = {}
    for request in requests:
        for name, ns in steps_of(request, by_trace.get(request.trace_id, [])).items():
            offsets.setdefault(name, []).append(ns / 1e6)
    rows = []
    for name, values in offsets.items():
        if len(values) < len(requests) / 2:  # an event only some requests have (one per response, …)
            continue
        values.sort()
        rows.append({"step": name, "requests": len(values), "median_ms": statistics.median(values),
                     "p10_ms": values[len(values) // 10], "p90_ms": values[(len(values) * 9) // 10]})
    rows.sort(key=lambda r: r["median_ms"])
    for index, row in enumerate(rows):
        row["step_ms"] = row["median_ms"] - rows[index - 1]["median_ms"] if index else 0.0
    return rows


def table(target: str, rows: list[dict[str, Any]], rounds: int, concurrency: int) -> str:
    lines = [f"{target}: {rows[0]['requests'] if rows else 0} requests ({rounds} rounds × {concurrency} streams "
             "started at once); ms after the client sent the request",
             "", "| step | median (p10–p90) | from the step before |", "|---|---|---|"]
    lines += [f"| {r['step']} | {r['median_ms']:.1f} ({r['p10_ms']:.1f}–{r['p90_ms']:.1f}) | {r['step_ms']:+.1f} |"
              for r in rows]
    return "\n".join(lines)


def spans_from(receiver_url: str, expected: dict[str, int], wait_s: float = 30.0,
               quiet_s: float = 8.0) -> list[dict[str, Any]]:
    """The receiver's spans of these traces, once each trace has spans from as many services as expected (Triton,
    the backend and vLLM: 3; vllm serve: 1; exporters batch), or `wait_s` has passed.

    Where Triton's gRPC frontend lost a request's trace context (backend/trace_attributes.py), its trace never gets
    Triton's spans, only the backend's and vLLM's: once every trace has those and nothing has arrived for `quiet_s`
    (longer than tritonserver's 5 s export interval, so Triton's spans of the other requests are in), waiting on is
    for nothing."""
    import requests

    deadline = time.monotonic() + wait_s
    arrived, last_arrival = -1, time.monotonic()
    while True:
        spans = [s for s in requests.get(f"{receiver_url}/spans", timeout=30).json() if s["trace_id"] in expected]
        services: dict[str, set[str]] = {}
        for span in spans:
            services.setdefault(span["trace_id"], set()).add(f"{span['service']}/{span['name'] == VLLM_SPAN}")
        if len(spans) != arrived:
            arrived, last_arrival = len(spans), time.monotonic()
        have = {t: len(services.get(t, ())) for t in expected}
        whole = all(have[t] >= n for t, n in expected.items())
        without_triton = all(have[t] >= min(n, WITHOUT_TRITON) for t, n in expected.items())
        if whole or (without_triton and time.monotonic() - last_arrival >= quiet_s) or time.monotonic() > deadline:
            return spans
        time.sleep(1.0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32, help="per request (the first token is what is timed)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--vllm-serve", action="store_true", help="the same rounds against vllm serve, alternating")
    parser.add_argument("--configs", default="h", help="comma-separated Triton HTTP configurations of make bench, "
                        f"one model each on the traced tritonserver: {','.join(sorted(TIMED))}")
    parser.add_argument("--grpc", action="store_true",
                        help="each configuration's model over gRPC streaming too (a target of its own)")
    parser.add_argument("--engine-args", type=bench.engine_args, default={}, help="as make bench's")
    parser.add_argument("--output", default=str(ROOT / ".bench" / "timeline.json"))
    args = parser.parse_args(argv)
    configs = [key for key in args.configs.split(",") if key]
    if not configs or set(configs) - TIMED:
        parser.error(f"--configs {args.configs}: choose among {','.join(sorted(TIMED))}")
    bench.ENGINE.update(args.engine_args)

    port = free_port()
    receiver = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "otlp_receiver.py"), str(port)])
    receiver_url = f"http://127.0.0.1:{port}"
    servers: dict[str, Any] = {}
    sent: list[Sent] = []
    loop = asyncio.new_event_loop()
    try:
        with tempfile.TemporaryDirectory(prefix="timeline-") as tmp:
            models = {key: bench.write_config_model(Path(tmp), key) for key in configs}
            bench.say("starting tritonserver (OpenTelemetry mode)" + (" and vllm serve" if args.vllm_serve else ""))
            servers["triton"] = TritonServer(Path(tmp), extra_args=bench.tracing_args(f"{receiver_url}/v1/traces"),
                                             log_path=ROOT / ".build" / "timeline-tritonserver.log").start()
            if args.vllm_serve:
                servers["vllm serve"] = bench.VllmServe(ROOT / ".build" / "timeline-vllm-serve.log",
                                                        otlp_traces_endpoint=f"{receiver_url}/v1/traces").start()
            for server in servers.values():
                server.wait_ready(timeout=900)
            rounds: dict[str, Callable[[], Awaitable[list[Sent]]]] = {}
            for key, model in models.items():
                label, grpc_label = f"{key}: {bench.CONFIGS[key][0]}", f"{key}'s model over gRPC"
                rounds[label] = partial(triton_round, servers["triton"], model, label, args.concurrency, args.tokens)
                if args.grpc:
                    rounds[grpc_label] = partial(grpc_round, servers["triton"], model, key in bench.BATCHED_ADMISSION,
                                                 grpc_label, args.concurrency, args.tokens)
            if args.vllm_serve:
                rounds["vllm serve"] = lambda: vllm_serve_round(servers["vllm serve"], args.concurrency, args.tokens)
            order = list(rounds)
            for index in range(1 + args.rounds):  # one unmeasured warm-up round each
                for target in order if index % 2 else order[::-1]:
                    time.sleep(1.0)  # idle engines: each round starts from the same state
                    got = loop.run_until_complete(rounds[target]())
                    bench.say(f"round {index}/{args.rounds} · {target}: {len(got)} first tokens")
                    if index:
                        sent += got
            spans = spans_from(receiver_url, {s.trace_id: 1 if s.target == "vllm serve" else 3 for s in sent})
    finally:
        loop.run_until_complete(bench.close_http_session())
        loop.close()
        for server in servers.values():
            server.stop()
        receiver.terminate()

    report: dict[str, Any] = {"workload": {"concurrency": args.concurrency, "tokens": args.tokens,
                                           "rounds": args.rounds, "engine": bench.ENGINE},
                              "machine": bench.machine(), "command": "make timeline TIMELINE_ARGS='"
                              + " ".join(argv) + "'", "timelines": {}}
    for target in order:
        rows = summary([s for s in sent if s.target == target], spans)
        report["timelines"][target] = rows
        print("\n" + table(target, rows, args.rounds, args.concurrency))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    bench.say(f"JSON written to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
