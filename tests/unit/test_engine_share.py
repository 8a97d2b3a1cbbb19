"""Where a model's instances meet to share one engine (backend.engine_share): slots, the owner, a reload's second
share, a dead stub's slot, the owner's bounded wait for the others, and the watch of an engine another instance
started — on real files and processes, without Triton or vLLM."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from vllm_triton_observable.backend.engine_share import GENERATIONS, EngineShare, OwnersEngine
from vllm_triton_observable.common.errors import ConfigError


def join(tmp_path, clients=2, model="m"):
    return EngineShare.join(tmp_path, 4242, model, "1", clients)


def ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_instances_take_slots_in_order_and_slot_0_owns_the_engine(tmp_path):
    first, second = join(tmp_path), join(tmp_path)
    assert (first.index, second.index) == (0, 1) and first.owner and not second.owner
    assert first.directory == second.directory and first.owner_pid() == second.owner_pid() > 0
    inputs, outputs = first.addresses()
    assert inputs == [f"ipc://{first.directory}/in-0", f"ipc://{first.directory}/in-1"]
    assert outputs == [f"ipc://{first.directory}/out-0", f"ipc://{first.directory}/out-1"]
    assert join(tmp_path, model="other").directory != first.directory  # another model, another engine


def test_a_reload_while_the_model_serves_meets_in_a_share_of_its_own(tmp_path):
    old = [join(tmp_path), join(tmp_path)]
    new = [join(tmp_path), join(tmp_path)]
    assert [s.index for s in new] == [0, 1] and new[0].directory != old[0].directory
    for _ in range((GENERATIONS - 2) * 2):
        join(tmp_path)
    with pytest.raises(ConfigError, match=r"SHARED_ENGINE: model 'm' already has 4 loads of 2 instances running"):
        join(tmp_path)


def test_the_slot_of_a_stub_that_is_gone_is_taken_over(tmp_path):
    owner = join(tmp_path)
    (owner.directory / "slot-1").write_text(str(ended_pid()))
    assert join(tmp_path).index == 1 and join(tmp_path).directory != owner.directory


def test_leaving_gives_the_slot_back_and_the_owner_removes_the_sockets(tmp_path):
    owner, other = join(tmp_path), join(tmp_path)
    (owner.directory / "in-0").write_text("")
    other.leave()
    assert not (owner.directory / "slot-1").exists() and owner.directory.exists()
    owner.leave()
    assert not owner.directory.exists()


def test_the_owner_waits_for_the_others_to_leave_within_its_bound(tmp_path):
    owner, other = join(tmp_path), join(tmp_path)
    (owner.directory / "slot-1").write_text(str(other_pid := subprocess.Popen(["sleep", "30"]).pid))
    started = time.monotonic()
    assert owner.wait_for_others(0.3) == [other_pid] and time.monotonic() - started < 2
    threading.Timer(0.2, other.leave).start()
    assert owner.wait_for_others(5) == [] and time.monotonic() - started < 3
    subprocess.run(["kill", str(other_pid)], check=False)


def test_the_watch_of_anothers_engine_returns_when_it_ends_and_stops_on_shutdown():
    engine = subprocess.Popen(["sleep", "30"])
    watch = OwnersEngine([engine.pid])
    done = threading.Event()
    threading.Thread(target=lambda: (watch.monitor_engine_liveness(), done.set()), daemon=True).start()
    assert not done.wait(0.5)
    engine.kill()
    engine.wait()
    assert done.wait(3)  # the engine's death: vLLM's client marks itself dead and its requests fail
    stopped = OwnersEngine([subprocess.Popen(["sleep", "30"]).pid])
    ended = threading.Event()
    threading.Thread(target=lambda: (stopped.monitor_engine_liveness(), ended.set()), daemon=True).start()
    stopped.shutdown(timeout=1)
    assert ended.wait(3)  # closing the client stops the watch and leaves the engine to its owner
    assert OwnersEngine([ended_pid()]).monitor_engine_liveness() is None  # already gone: at once


def test_instances_starting_at_once_each_get_a_slot_of_their_own(tmp_path):
    """Stubs claim their slots in the same millisecond (Triton starts a model's instances together): each process
    gets its own, so exactly one starts the engine."""
    claim = ("import sys; from pathlib import Path; "
             "from vllm_triton_observable.backend.engine_share import EngineShare; "
             "print(EngineShare.join(Path(sys.argv[1]), 4242, 'm', '1', 6).index, flush=True); sys.stdin.read()")
    stubs = [subprocess.Popen([sys.executable, "-c", claim, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    try:
        indices = sorted(int(stub.stdout.readline()) for stub in stubs)  # each holds its slot until its stdin closes
    finally:
        for stub in stubs:
            stub.stdin.close()
            stub.wait(10)
    assert indices == list(range(6))


def test_a_claim_waits_for_a_held_lock_only_within_its_bound(tmp_path, monkeypatch):
    """A process stuck while holding the share's lock (stopped, say) fails the load with a sentence, not a hang."""
    from vllm_triton_observable.backend import engine_share

    share = join(tmp_path).directory
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print(flush=True); time.sleep(30)",
                               str(share / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()  # it holds the lock
        monkeypatch.setattr(engine_share, "LOCK_TIMEOUT_S", 0.3)
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"SHARED_ENGINE: another instance held .*\.lock for more than 0\.3 s"):
            join(tmp_path)
        assert time.monotonic() - started < 3
    finally:
        holder.kill()
        holder.wait()
