"""Failures inside the metrics path are counted and logged once per kind; they never reach the engine.

vLLM calls the stat loggers' `record()` inside its output handler: an exception there would mark the engine
dead and fail every request. A metrics bug must cost at most some metric values, never serving.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

from . import names
from .registry import InstanceRegistry, Kind

STAGES = ("record", "publish")


class MetricErrors:
    def __init__(self, registry: InstanceRegistry, log_error: Callable[[str], None]) -> None:
        counter = registry.classes()[Kind.COUNTER](
            names.METRICS_ERRORS, "Failures inside the metrics path, by stage: record (vLLM's stat logger) or publish "
            "(sending to Triton). The engine keeps serving; some metric values may be missing.",
            labelnames=[names.STAGE])
        self._counts = {stage: counter.labels(stage) for stage in STAGES}
        self._log_error = log_error
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def report(self, stage: str, exc: BaseException, kind: str | None = None) -> None:
        """Count one failure; log it if it is the first of its kind (its exception type, unless named)."""
        self._counts[stage].inc()
        key = (stage, kind or type(exc).__name__)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        detail = "".join(traceback.format_exception(exc)).rstrip()
        self._log_error(f"metrics {stage} failed; the engine keeps serving. Counted in {names.METRICS_ERRORS}"
                        f"{{stage=\"{stage}\"}}; further errors of this kind ({key[1]}) are not logged.\n{detail}")
