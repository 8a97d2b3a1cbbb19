"""Triton's own benchmark tools, as scripts/ensure_perf_tools.sh installs them: perf_analyzer and genai-perf.

`make genai-perf` profiles a model with genai-perf (gRPC streaming, `--endpoint-type kserve --backend vllm`) and
prints genai-perf's table: time to first token, inter-token latency, token and request throughput. Without
`--url` it starts tritonserver on the sample model repository for the run and stops it afterwards; with `--url`
it profiles a server that is already running (e.g. `make serve`). Artifacts go to .genai-perf/ (git-ignored).

    python scripts/perf_tools.py [--url localhost:8001] [--model vllm_model] [--concurrency 8] [--requests 64]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from triton_launcher import ROOT, TINY_MODEL, TritonServer

TOOLS = ROOT / ".build" / "perf-tools"
ARTIFACTS = ROOT / ".genai-perf"


def tool_env() -> dict[str, str]:
    """The environment perf_analyzer and genai-perf run in: their venv's bin first, libb64 and libcudart found."""
    if not (TOOLS / "bin" / "perf_analyzer").exists():
        raise SystemExit("perf_analyzer is not installed: run scripts/ensure_perf_tools.sh (make genai-perf does)")
    libraries = [*TOOLS.glob("libb64/usr/lib/*"), *TOOLS.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib")]
    env = dict(os.environ)
    env["PATH"] = f"{TOOLS / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*map(str, libraries), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


def genai_perf_command(url: str, model: str, *, concurrency: int, requests: int, input_tokens: int,
                       output_tokens: int, artifacts: Path, tokenizer: Path = TINY_MODEL,
                       verbose: bool = False) -> list[str]:
    # No --warmup-request-count: perf_analyzer 2.51 never finishes a run that has one.
    return ["genai-perf", "profile", "--model", model, "--backend", "vllm", "--endpoint-type", "kserve",
            "--streaming", "--url", url, "--tokenizer", str(tokenizer), "--concurrency", str(concurrency),
            "--request-count", str(requests), "--synthetic-input-tokens-mean", str(input_tokens),
            "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(output_tokens),
            "--random-seed", "0", "--artifact-dir", str(artifacts), *(["--verbose"] if verbose else [])]


def profile(args: argparse.Namespace, url: str) -> int:
    command = genai_perf_command(url, args.model, concurrency=args.concurrency, requests=args.requests,
                                 input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                                 artifacts=Path(args.artifacts), verbose=args.verbose)
    print("[genai-perf]", " ".join(command), flush=True)
    return subprocess.run(command, env=tool_env(), cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="gRPC host:port of a running server (default: start one for the run)")
    parser.add_argument("--model", default="vllm_model", help="a decoupled vLLM model (genai-perf streams)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=64, help="requests measured (perf_analyzer --request-count)")
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--artifacts", default=str(ARTIFACTS), help="genai-perf's --artifact-dir")
    parser.add_argument("--verbose", action="store_true",
                        help="genai-perf --verbose: perf_analyzer's own output too (genai-perf discards it otherwise, "
                             "so a run whose perf_analyzer exported nothing would not say why)")
    args = parser.parse_args(argv)
    tool_env()  # fail before starting a server if the tools are missing
    if args.url:
        return profile(args, args.url)
    with TritonServer(ROOT / "samples" / "model_repository", log_path=ROOT / ".build" / "genai-perf-server.log"
                      ) as server:
        print(f"[genai-perf] starting tritonserver on the sample repository (log: {server.log_path})", flush=True)
        server.wait_ready(600)
        return profile(args, f"127.0.0.1:{server.grpc_port}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
