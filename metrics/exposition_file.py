"""VLLM_TRITON_EXPOSITION_DIR: each instance's registry written as prometheus_client renders it — vLLM's own
/metrics text of the same observations — after every publish, to `<dir>/<model_instance>.prom`.

It is how the histograms Triton exposes (replayed, metrics.histogram) are checked against what vLLM itself would
expose, series by series: the tests compare the two, and an operator can do the same on a live server. Unset
(the default), nothing is rendered or written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from prometheus_client import generate_latest

from .registry import InstanceRegistry

ENV = "VLLM_TRITON_EXPOSITION_DIR"


def exposition_path(instance: str, env: Mapping[str, str] = os.environ) -> Path | None:
    directory = env.get(ENV)
    return Path(directory) / f"{instance}.prom" if directory else None


def write_exposition(registry: InstanceRegistry, path: Path) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".prom.partial")
    partial.write_bytes(generate_latest(registry))
    os.replace(partial, path)
