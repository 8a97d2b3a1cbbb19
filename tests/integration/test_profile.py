"""A short run of `make profile` against a real tritonserver: CPU and context switches per token per process,
and py-spy's breakdown of the stub's Python by owner (perf's native split only where perf is installed). The
figures themselves are not asserted; that each process was measured and the stub's Python was sampled is."""

import json
import os
import shutil
import subprocess
import sys

from helpers import ROOT


def test_profile_measures_every_process_and_the_stubs_python(tmp_path):
    output = tmp_path / "profile.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "profile_serving.py"), "--seconds", "4", "--concurrency", "4",
         "--tokens", "16", "--output", str(output)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    profile = json.loads(output.read_text())
    assert profile["tokens"] > 0
    assert set(profile["processes"]) == {"client", "tritonserver", "stub", "EngineCore", "worker"}
    for name in ("client", "tritonserver", "stub"):
        assert profile["processes"][name]["cpu_ms"] > 0, name
    # every response crosses from the stub into tritonserver: its threads wake for each
    assert profile["processes"]["tritonserver"]["voluntary_switches"] > 0.5
    owners = dict(profile["python"]["owners"])
    assert profile["python"]["total"] > 0 and owners.get("backend (requests, responses)", 0) > 0, owners
    if shutil.which("perf"):
        assert profile["native"]["tritonserver"]["dso"] and profile["native"]["stub"]["symbols"]
    assert "| stub |" in result.stdout


def test_the_first_token_timeline_places_every_step_of_a_request_in_order(tmp_path):
    """`make timeline` on a real server, one of `make bench`'s configurations (q: batched admission) over HTTP and
    over gRPC (with the batch dimension): each request's trace from Triton, the backend and vLLM, on the client's
    time axis, step after step as a request goes through them. One engine: with h's beside it (two), or r's four
    stubs, this test beside the other worker's servers took this machine past its memory (the OOM killer took an
    engine's worker, of this test or the other's). gRPC without the batch dimension is make bench's c (test_bench)."""
    output = tmp_path / "timeline.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "first_token_timeline.py"), "--concurrency", "3", "--rounds", "1",
         "--tokens", "4", "--configs", "q", "--grpc", "--output", str(output)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    timelines = json.loads(output.read_text())["timelines"]
    assert set(timelines) == {"q: Triton HTTP SSE, metrics on, batched admission", "q's model over gRPC"}
    chain = ["client: request sent", "triton: REQUEST_START", "triton: COMPUTE_START", "backend: execute() took it",
             "backend: submitted to the engine", "vLLM: arrival (engine client)", "vLLM: first token",
             "backend: first token"]
    for name, rows in timelines.items():
        at = {row["step"]: row["median_ms"] for row in rows}
        steps = chain
        if name.endswith("gRPC") and "triton: REQUEST_START" not in at:
            # Triton's gRPC frontend lost most of these requests' trace contexts (backend/trace_attributes.py):
            # the backend's and vLLM's steps still continue the client's traces
            steps = [step for step in chain if not step.startswith("triton: ")]
        assert all(step in at for step in steps), (name, sorted(at))
        assert [at[step] for step in steps] == sorted(at[step] for step in steps), (name, {s: at[s] for s in steps})
        assert at["client: first token received"] >= at["backend: first token"] > 0, name
        assert rows[0]["requests"] == 3 and "backend: first response sent" in at, name
