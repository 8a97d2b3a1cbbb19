"""SHARED_ENGINE (docs/serving.md, "Several stubs, one engine"): a model's Triton instances as front ends of one
vLLM engine, on a server of this module's in explicit mode with one model, `vllm_shared` (instance_group count 2,
metrics and the health monitor on, HEALTH_RECOVERY=restart; one engine, like the other small modules that run
last).

Its contract: one EngineCore for both instances, each instance serving its share of the requests with the same
tokens; a killed engine ends every instance's requests with an error, is replaced once for all of them, and both
serve again; a reload (a load of the loaded model, its files changed) starts the new instances' engine in a share
of their own and leaves one engine once the old instances are gone; an unload closes the other instance's client
before the engine is shut down, and leaves neither processes nor the sockets' directory behind.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import (
    cmdline,
    explicit_mode_server,
    generate,
    generate_stream,
    repository,
    scrape,
    start_load,
    touch_model,
    value,
    wait_until,
    write_model,
)

from vllm_triton_observable.backend.ipc_dir import PREFIX
from vllm_triton_observable.metrics import names

MODEL = "vllm_shared"
SHARED = {"SHARED_ENGINE": "true", "REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true",
          "HEALTH_RECOVERY": "restart", "HEALTH_CHECK_INTERVAL_S": "0.5", "HEALTH_PROBE_TIMEOUT_S": "1",
          "HEALTH_STALL_TIMEOUT_S": "10", "HEALTH_RESTART_BACKOFF_S": "0.5", "HEALTH_RESTART_MAX_ATTEMPTS": "2"}
SAMPLING = json.dumps({"max_tokens": 8, "temperature": 0})
INSTANCES = (f"{MODEL}_0_0", f"{MODEL}_0_1")
UNLOADED = f"successfully unloaded '{MODEL}'"  # Triton's line once a load of the model is gone


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("shared_repository"), MODEL, params=SHARED, instances=2)


@pytest.fixture(scope="module")
def shared_server(model_dir):
    with explicit_mode_server(model_dir.parent, {}, [MODEL]) as triton:
        yield triton


def stubs(server) -> list[psutil.Process]:
    return [p for p in psutil.Process(server.process.pid).children() if f"/{MODEL}/1/model.py" in cmdline(p)]


def engine_cores(server) -> list[psutil.Process]:
    return [c for stub in stubs(server) for c in stub.children() if "VLLM::EngineCore" in cmdline(c)]


def per_instance(server, name: str) -> dict[str, float]:
    families = scrape(server)
    return {instance: value(families, name, model=MODEL, model_instance=instance) for instance in INSTANCES}


def serve_both(server, n: int = 8) -> list[str]:
    """`n` requests at once, so that Triton hands them to both instances; their texts."""
    texts: list[str] = [""] * n

    def one(i: int) -> None:
        status, body = generate(server, MODEL, {"text_input": "The capital of France is",
                                                "sampling_parameters": SAMPLING})
        texts[i] = body["text_output"] if status == 200 else f"{status}: {body}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return texts


def test_the_instances_share_one_engine(shared_server):
    assert len(stubs(shared_server)) == 2 and len(engine_cores(shared_server)) == 1
    log = shared_server.log_text()
    assert "SHARED_ENGINE: the model's 2 instances share one engine" in log
    assert "is client 0 of 2; it starts the engine" in log
    assert "is client 1 of 2; it uses the engine of instance slot 0 (pid " in log
    assert per_instance(shared_server, names.ENGINE_HEALTHY) == dict.fromkeys(INSTANCES, 1)


def test_both_instances_serve_the_same_tokens(shared_server):
    texts = serve_both(shared_server) + [serve_both(shared_server, 1)[0]]
    assert len(set(texts)) == 1 and texts[0].startswith("The capital of France is"), texts  # greedy: one answer
    streamed = generate_stream(shared_server, MODEL, {"text_input": "The capital of France is", "stream": True,
                                                      "sampling_parameters": SAMPLING})
    assert "".join(e["text_output"] for e in streamed) in texts[0]
    wait_until(lambda: sum(per_instance(shared_server, names.VLLM_REQUEST_SUCCESS).values()) == 10, timeout=15)
    served = per_instance(shared_server, names.VLLM_REQUEST_SUCCESS)
    assert all(count >= 1 for count in served.values()), served  # each instance's own stat logger saw its own


def test_a_killed_engine_is_replaced_once_for_every_instance(shared_server):
    streams = start_load(shared_server, MODEL, n=4)
    (core,) = engine_cores(shared_server)
    killed = time.monotonic()
    os.kill(core.pid, signal.SIGKILL)
    for s in streams:
        s.join(60)
        assert s.error is not None, f"a request did not end with an error: {s.events[-1:]}"
        assert s.error[0] - killed < 30, s.error
    wait_until(lambda: 0 in per_instance(shared_server, names.ENGINE_HEALTHY).values(), timeout=10)
    wait_until(lambda: per_instance(shared_server, names.ENGINE_HEALTHY) == dict.fromkeys(INSTANCES, 1),
               timeout=300, interval=1)
    (new_core,) = engine_cores(shared_server)
    assert new_core.pid != core.pid
    before = per_instance(shared_server, names.VLLM_REQUEST_SUCCESS)
    texts = serve_both(shared_server)
    assert all(not t[:3].isdigit() for t in texts), texts
    wait_until(lambda: sum(per_instance(shared_server, names.VLLM_REQUEST_SUCCESS).values())
               == sum(before.values()) + 8, timeout=15)
    after = per_instance(shared_server, names.VLLM_REQUEST_SUCCESS)
    assert all(after[i] > before[i] for i in INSTANCES), (before, after)  # both clients of the new engine


def shares(server) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}{server.process.pid}-share-*"))


def test_a_reload_leaves_one_engine_that_both_new_instances_use(shared_server, model_dir):
    """Triton loads a loaded model's new instances before it unloads the old ones (a load of a loaded model whose
    files changed): the new instances find every slot of the share held, meet in the next one and start an engine
    of their own; the old engine goes with the old instances, its share with it."""
    (old_core,) = engine_cores(shared_server)
    (old_share,) = shares(shared_server)
    old_stubs = stubs(shared_server)
    touch_model(model_dir)
    assert repository(shared_server, "load", MODEL).status_code == 200
    _, alive = psutil.wait_procs([*old_stubs, old_core], timeout=120)
    assert not alive, alive
    wait_until(lambda: not old_share.exists(), timeout=30)
    (new_share,) = shares(shared_server)
    assert new_share.name == old_share.name[:-1] + "1", (old_share, new_share)  # the next generation
    (new_core,) = engine_cores(shared_server)
    assert new_core.pid != old_core.pid and len(stubs(shared_server)) == 2
    assert shared_server.log_text().count("is client 0 of 2; it starts the engine") == 2
    wait_until(lambda: shared_server.log_text().count(UNLOADED) == 1, timeout=60)  # Triton is done with the old load
    wait_until(lambda: per_instance(shared_server, names.ENGINE_HEALTHY) == dict.fromkeys(INSTANCES, 1), timeout=30)
    before = per_instance(shared_server, names.VLLM_REQUEST_SUCCESS)
    texts = serve_both(shared_server)
    assert all(t.startswith("The capital of France is") for t in texts), texts
    wait_until(lambda: sum(per_instance(shared_server, names.VLLM_REQUEST_SUCCESS).values())
               == sum(before.values()) + 8, timeout=15)
    after = per_instance(shared_server, names.VLLM_REQUEST_SUCCESS)
    assert all(after[i] > before[i] for i in INSTANCES), (before, after)  # both clients of the new engine


def test_an_unload_closes_the_clients_then_the_engine_and_leaves_nothing(shared_server):
    processes = [*stubs(shared_server), *(c for stub in stubs(shared_server) for c in stub.children(recursive=True))]
    share = shares(shared_server)
    assert len(share) == 1 and (share[0] / "slot-0").exists(), share
    earlier = shared_server.log_text()  # a reload's unload of the earlier load included
    assert repository(shared_server, "unload", MODEL).status_code == 200
    wait_until(lambda: shared_server.log_text().count(UNLOADED) > earlier.count(UNLOADED), timeout=120)
    log = shared_server.log_text()[len(earlier):]
    closed, shut = log.index("its client of the shared engine is closed"), log.rindex("the engine and its processes "
                                                                                       "are shut down")
    assert closed < shut  # the owner waited for the other instance before it shut the engine down
    assert "still use it" not in log
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, alive
    assert not share[0].exists()
