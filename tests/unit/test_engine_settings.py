"""The tiny model's engine arguments per device (scripts/engine_settings.py) and make serve's GPU copy of the
sample repository (the device is forced with VLLM_TRITON_DEVICE; nothing starts)."""

import json

import engine_settings
import pytest
import triton_launcher


@pytest.fixture
def device(monkeypatch):
    def force(name: str) -> None:
        monkeypatch.setenv("VLLM_TRITON_DEVICE", name)
        engine_settings.gpu_present.cache_clear()

    yield force
    engine_settings.gpu_present.cache_clear()


def test_on_cpu_nothing_changes(device):
    device("cpu")
    for purpose in ("test", "serve", "bench"):
        assert engine_settings.engine_for(purpose) == {"model": str(engine_settings.TINY_MODEL), "max_model_len": 1024,
                                                       "dtype": "float32", "enforce_eager": True}


def test_on_a_gpu_bf16_a_memory_share_each_and_cuda_graphs_outside_the_tests(device):
    device("gpu")
    test, serve, bench = (engine_settings.engine_for(p) for p in ("test", "serve", "bench"))
    assert {e["dtype"] for e in (test, serve, bench)} == {"bfloat16"}
    assert test["enforce_eager"] is True and serve["enforce_eager"] is False and bench["enforce_eager"] is False
    # the suite's engines (about ten at once) share one GPU; vLLM's default would take 90 % for the first
    assert test["gpu_memory_utilization"] * 12 < 1 and bench["gpu_memory_utilization"] * 6 < 1


def test_make_serve_runs_the_samples_with_the_gpus_settings_and_an_operators_repository_as_it_is(device, tmp_path,
                                                                                                 monkeypatch):
    samples = triton_launcher.SAMPLE_REPOSITORY.parent
    device("cpu")
    assert triton_launcher.device_repository(triton_launcher.SAMPLE_REPOSITORY) == triton_launcher.SAMPLE_REPOSITORY
    device("gpu")
    build = tmp_path / "root" / ".build"
    build.mkdir(parents=True)
    (tmp_path / "root" / "samples").symlink_to(samples)
    monkeypatch.setattr(triton_launcher, "ROOT", tmp_path / "root")
    served = triton_launcher.device_repository(triton_launcher.SAMPLE_REPOSITORY)
    assert served == build / "gpu-model_repository"
    engine = json.loads((served / "vllm_model" / "1" / "model.json").read_text())
    assert engine == engine_settings.engine_for("serve")  # the sample's own keys, the GPU's settings
    assert (served / "vllm_model" / "config.pbtxt").read_text() == (
        triton_launcher.SAMPLE_REPOSITORY / "vllm_model" / "config.pbtxt").read_text()
    assert not list(served.glob("*/1/tiny-llama*"))  # the weights stay where they are
    embed = json.loads((triton_launcher.device_repository(samples / "embedding_repository") / "vllm_embed" / "1"
                        / "model.json").read_text())
    assert embed["runner"] == "pooling" and embed["dtype"] == "bfloat16" and embed["model"] == str(
        engine_settings.TINY_MODEL)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    assert triton_launcher.device_repository(theirs) == theirs
