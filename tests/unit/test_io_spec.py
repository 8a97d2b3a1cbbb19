"""auto_complete_config: the official contract by default, batched admission where config.pbtxt asks for it."""

from __future__ import annotations

from typing import Any

from vllm_triton_observable.backend import io_spec


class FakeModelConfig:
    """The part of `pb_utils.ModelConfig` that `complete_config` uses, with its checks."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = {"max_batch_size": 0, "input": [], "output": [], **config}

    def as_dict(self) -> dict[str, Any]:
        return self.config

    def add_input(self, spec: dict[str, Any]) -> None:
        self.config["input"].append(spec)

    def add_output(self, spec: dict[str, Any]) -> None:
        self.config["output"].append(spec)

    def set_model_transaction_policy(self, policy: dict[str, Any]) -> None:
        self.config["model_transaction_policy"] = policy

    def set_max_batch_size(self, size: int) -> None:
        if self.config["max_batch_size"] > size:  # as pb_utils: a load fails on a configured larger one
            raise ValueError(f"configuration specified max_batch_size {self.config['max_batch_size']}")
        self.config["max_batch_size"] = size

    def set_dynamic_batching(self) -> None:
        self.config.setdefault("dynamic_batching", {})


def test_the_official_contract_by_default():
    config = io_spec.complete_config(FakeModelConfig({})).as_dict()
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert {i["name"] for i in config["input"]} >= {"text_input", "stream", "sampling_parameters"}


def test_max_batch_size_in_config_pbtxt_turns_on_the_dynamic_batcher():
    """Before batched admission a configured max_batch_size failed the load (pb_utils refuses to lower it)."""
    config = io_spec.complete_config(FakeModelConfig({"max_batch_size": 64})).as_dict()
    assert config["max_batch_size"] == 64 and config["dynamic_batching"] == {}
    assert {i["name"]: i["dims"] for i in config["input"]}["text_input"] == [1]  # a batch dimension goes before it
    tuned = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 100}}
    assert io_spec.complete_config(FakeModelConfig(tuned)).as_dict()["dynamic_batching"] == {
        "max_queue_delay_microseconds": 100}  # the operator's own settings stay
