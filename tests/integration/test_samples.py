"""The client samples under samples/clients/ run against a real server and print what the server generates."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT, generate

CLIENTS = ROOT / "samples" / "clients"
PROMPT = "What is Triton?"


def run_sample(*command: str) -> str:
    result = subprocess.run(list(command), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def greedy(server, model: str, **extra) -> str:
    status, body = generate(server, model, {"text_input": PROMPT, **extra,
                                            "parameters": {"max_tokens": 32, "temperature": 0}})
    assert status == 200, body
    return body["text_output"]


def test_curl_generate_generate_stream_and_lora(server):
    out = run_sample("bash", str(CLIENTS / "curl.sh"), server.http_url, "vllm_model", "vllm_lora", "tiny-lora")
    first, *rest = out.splitlines()
    assert json.loads(first)["text_output"].startswith(PROMPT)
    events = [json.loads(line[len("data: "):]) for line in rest if line.startswith("data: ")]
    assert len(events) > 1 and all("text_output" in e for e in events)
    assert json.loads(rest[-1])["model_name"] == "vllm_lora"


def test_grpc_streaming_prints_the_generated_text(server):
    out = run_sample(sys.executable, str(CLIENTS / "grpc_stream.py"), "--url", f"127.0.0.1:{server.grpc_port}",
                     PROMPT)
    assert out == greedy(server, "vllm_model", exclude_input_in_output=True) + "\n"


def test_grpc_streaming_with_a_lora_adapter(server):
    out = run_sample(sys.executable, str(CLIENTS / "grpc_stream.py"), "--url", f"127.0.0.1:{server.grpc_port}",
                     "--model", "vllm_lora", "--lora", "tiny-lora", PROMPT)
    assert out.strip() and out != greedy(server, "vllm_lora", exclude_input_in_output=True) + "\n"


def test_http_infer_on_a_model_that_is_not_decoupled(server):
    out = run_sample(sys.executable, str(CLIENTS / "http_infer.py"), "--url", f"127.0.0.1:{server.http_port}",
                     "--model", "vllm_infer", PROMPT)
    assert out == greedy(server, "vllm_infer") + "\n"
