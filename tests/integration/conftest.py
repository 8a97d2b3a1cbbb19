"""The shared real server: tritonserver + this backend + vLLM engines for the tiny model.

Models (one server, started once per session, because each engine takes ~30-60 s to start on CPU):
  vllm_model      the official sample's layout, REPORT_CUSTOM_METRICS "true", health monitor on
  vllm_lora       multi-LoRA (multi_lora.json), two instances (two engines), metrics on
  vllm_nometrics  REPORT_CUSTOM_METRICS unset
"""

from __future__ import annotations

import json

import pytest
from helpers import BASE_ENGINE, TINY_LORA, server_env, write_model
from triton_launcher import TritonServer

LORA_ENGINE = {**BASE_ENGINE, "enable_lora": True, "max_lora_rank": 8, "max_loras": 1}
METRICS_ON = {"REPORT_CUSTOM_METRICS": "true"}


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("model_repository")
    write_model(repo, "vllm_model", params={**METRICS_ON, "ENABLE_VLLM_HEALTH_CHECK": "true"})
    write_model(repo, "vllm_lora", LORA_ENGINE, params=METRICS_ON, instances=2,
                files={"multi_lora.json": json.dumps({"tiny-lora": str(TINY_LORA)})})
    write_model(repo, "vllm_nometrics")
    with TritonServer(repo, env=server_env()) as triton:
        triton.wait_ready(timeout=900)
        yield triton
