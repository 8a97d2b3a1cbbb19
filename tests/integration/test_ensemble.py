"""The ensemble walkthrough (samples/ensemble_repository), served the way `make serve MODEL_REPO=...` serves it:
`vllm_ensemble` (raw_text → preprocessor → vllm_model → postprocessor → final_output) answers plain `infer()` over
HTTP and gRPC and `/generate`; `vllm_ensemble_stream` streams over gRPC and `generate_stream`; each step shows on
the dashboards."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from helpers import (
    ROOT,
    generate,
    generate_stream,
    launched,
    printed_commands,
    run_command,
    scrape,
    snapshot,
    sse_events,
    value,
    wait_until,
)
from prometheus_server import Prometheus, substitute
from tritonclient.utils import InferenceServerException

from vllm_triton_observable.metrics import names

REPO = ROOT / "samples" / "ensemble_repository"
CLIENT = ROOT / "samples" / "clients" / "ensemble_client.py"
TEXT = "What is Triton?"
STEPS = ("preprocessor", "vllm_model", "postprocessor")


@pytest.fixture(scope="module")
def served():
    with launched(REPO) as served:
        yield served


@pytest.fixture(scope="module")
def ensemble(served):
    return served.endpoint


def clean(text: str) -> str:
    """The postprocessor's own cleaning, loaded from the sample with Triton's real triton_python_backend_utils."""
    sys.path.insert(0, str(Path(os.environ["BACKEND_DIR"]) / "python"))
    try:
        spec = importlib.util.spec_from_file_location("postprocessor_model", REPO / "postprocessor" / "1" / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module.clean(text)


def by_hand(ensemble, text: str = TEXT) -> str:
    """What the ensemble should answer: its steps called one after the other over HTTP."""
    status, prepared = generate(ensemble, "preprocessor", {"raw_text": text})
    assert status == 200, prepared
    status, generated = generate(ensemble, "vllm_model", {
        "text_input": prepared["text_input"], "exclude_input_in_output": prepared["exclude_input_in_output"],
        "sampling_parameters": prepared["sampling_parameters"]})
    assert status == 200, generated
    expected = clean(generated["text_output"])
    assert expected.strip(), generated  # the comparison means something only if text was generated
    return expected


def client(*args: str) -> str:
    return run_command(" ".join([sys.executable, str(CLIENT), *(json.dumps(a) for a in args)]))


def test_the_preprocessor_builds_the_documented_prompt(ensemble):
    # The tiny model's tokenizer has no chat template: PROMPT_TEMPLATE from config.pbtxt applies.
    status, prepared = generate(ensemble, "preprocessor", {"raw_text": TEXT})
    assert status == 200, prepared
    assert prepared["text_input"] == f"Question: {TEXT}\nAnswer:"
    assert json.loads(prepared["sampling_parameters"]) == {"max_tokens": 64, "temperature": 0}
    assert prepared["exclude_input_in_output"] is True


def test_the_walkthrough_client_gets_the_generated_text_over_http_infer(ensemble):
    assert client("--url", f"127.0.0.1:{ensemble.http_port}", TEXT) == by_hand(ensemble) + "\n"


def test_grpc_unary_infer_and_http_generate(ensemble):
    expected = by_hand(ensemble)
    raw_text = grpcclient.InferInput("raw_text", [1], "BYTES")
    raw_text.set_data_from_numpy(np.array([TEXT], dtype=object))
    result = grpcclient.InferenceServerClient(f"127.0.0.1:{ensemble.grpc_port}").infer("vllm_ensemble", [raw_text])
    assert result.as_numpy("final_output")[0].decode() == expected
    status, body = generate(ensemble, "vllm_ensemble", {"raw_text": TEXT})
    assert status == 200 and body["final_output"] == expected, body


def test_the_streaming_variant_streams_the_same_text(ensemble):
    expected = by_hand(ensemble)
    assert client("--url", f"127.0.0.1:{ensemble.grpc_port}", "--stream", TEXT) == expected + "\n"
    events = generate_stream(ensemble, "vllm_ensemble_stream", {"raw_text": TEXT})
    assert len(events) > 1, events  # one per engine step, each through the postprocessor
    assert "".join(e["final_output"] for e in events) == expected


def test_bad_raw_text_fails_alone_with_the_reason(ensemble):
    status, body = generate(ensemble, "vllm_ensemble", {"raw_text": "  "})
    assert status == 400 and "raw_text is empty" in body["error"], body
    raw_text = grpcclient.InferInput("raw_text", [1], "BYTES")
    raw_text.set_data_from_numpy(np.array([b"\xff\xfe"], dtype=object))
    with pytest.raises(InferenceServerException, match="raw_text is not UTF-8"):
        grpcclient.InferenceServerClient(f"127.0.0.1:{ensemble.grpc_port}").infer("vllm_ensemble", [raw_text])
    status, body = generate(ensemble, "vllm_ensemble", {"raw_text": TEXT})
    assert status == 200 and body["final_output"], body


def test_the_printed_examples_work(served):
    commands = printed_commands(served.output)
    models = [c.split("/v2/models/")[1].split("/")[0] for c in commands]
    assert models == ["vllm_ensemble", "vllm_ensemble_stream", "vllm_model", "vllm_model_stream",
                      "vllm_model_stream"], commands
    assert json.loads(run_command(commands[0]))["final_output"]
    assert len(sse_events(run_command(commands[1]))) > 1
    assert json.loads(run_command(commands[2]))["text_output"]
    assert json.loads(run_command(commands[3]))["text_output"]
    assert len(sse_events(run_command(commands[4]))) > 1


def test_each_step_counts_each_ensemble_request(ensemble):
    def counts(families):
        # prometheus_client's parser names every counter's sample ..._total.
        triton = {m: value(families, f"{names.TRITON_SUCCESS}_total", model=m) for m in ("vllm_ensemble", *STEPS)}
        return triton | {"vllm completed": value(families, names.REQUESTS_FINISHED, model="vllm_model",
                                                 outcome="completed")}

    before = counts(snapshot(ensemble))
    for _ in range(3):
        assert generate(ensemble, "vllm_ensemble", {"raw_text": TEXT})[0] == 200
    wait_until(lambda: counts(scrape(ensemble))["vllm completed"] - before["vllm completed"] == 3)
    after = counts(snapshot(ensemble))
    assert {k: after[k] - before[k] for k in after} == dict.fromkeys(after, 3)


def test_the_per_model_panels_show_the_ensemble_and_each_step(ensemble, tmp_path):
    board = json.loads((ROOT / "dashboards" / "generated" / "vllm-triton-server.json").read_text())
    titles = ("Requests per model", "Queue time per request", "Compute time per request")
    exprs = {p["title"]: p["targets"][0]["expr"] for p in board["panels"] if p["title"] in titles}
    assert set(exprs) == set(titles)
    with Prometheus(tmp_path, [f"127.0.0.1:{ensemble.metrics_port}"]) as prometheus:
        prometheus.wait_for_scrapes(2)
        for text in ("one", "two", "three"):
            assert generate(ensemble, "vllm_ensemble", {"raw_text": text})[0] == 200
            assert generate_stream(ensemble, "vllm_ensemble_stream", {"raw_text": text})
        prometheus.wait_for_scrapes(6)
        for title, expr in exprs.items():
            shown = {s["metric"][names.MODEL]: float(s["value"][1]) for s in prometheus.query(substitute(expr))}
            every = {"vllm_ensemble", "vllm_ensemble_stream", "vllm_model_stream", *STEPS}
            assert every <= set(shown), (title, shown)
            assert all(shown[m] > 0 for m in every), (title, shown)


# -- Triton's benchmark tools (installed by scripts/ensure_perf_tools.sh) ------------------------------------
def completed(server, model: str) -> float:
    return value(snapshot(server), f"{names.TRITON_SUCCESS}_total", model=model)


def test_genai_perf_profiles_the_streaming_model(ensemble, tmp_path):
    before = completed(ensemble, "vllm_model_stream")
    out = run_command(" ".join([
        sys.executable, str(ROOT / "scripts" / "perf_tools.py"), "--url", f"127.0.0.1:{ensemble.grpc_port}",
        "--model", "vllm_model_stream", "--concurrency", "2", "--requests", "8", "--input-tokens", "32",
        "--output-tokens", "16", "--artifacts", str(tmp_path), "--verbose"]), timeout=300)
    assert "Time To First Token" in out and "Inter Token Latency" in out, out[-3000:]
    (export,) = tmp_path.glob("*/profile_export_genai_perf.json")
    figures = json.loads(export.read_text())
    assert figures["request_count"]["avg"] == 8
    assert 0 < figures["time_to_first_token"]["p50"] < figures["request_latency"]["p50"]
    assert figures["inter_token_latency"]["avg"] > 0
    assert completed(ensemble, "vllm_model_stream") - before == 8  # what genai-perf counted is what was served


def test_perf_analyzer_drives_the_ensemble_over_http(ensemble, tmp_path):
    from perf_tools import tool_env

    data = tmp_path / "input.json"
    data.write_text(json.dumps({"data": [{"raw_text": [TEXT]}]}))
    before = {m: completed(ensemble, m) for m in ("vllm_ensemble", *STEPS)}
    done = subprocess.run(
        ["perf_analyzer", "-m", "vllm_ensemble", "-i", "http", "-u", f"127.0.0.1:{ensemble.http_port}",
         "--input-data", str(data), "--concurrency-range", "2", "--request-count", "6",
         "--measurement-mode", "count_windows"], capture_output=True, text=True, timeout=300, env=tool_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Composing models:" in done.stdout and all(f"{m}, version: 1" in done.stdout for m in STEPS), done.stdout
    served = {m: completed(ensemble, m) - before[m] for m in before}
    assert served == dict.fromkeys(before, 6), served
