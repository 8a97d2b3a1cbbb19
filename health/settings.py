"""The health monitor's config.pbtxt keys, each declared once with its default, bounds and meaning; safe defaults.

A rule across keys, or between a key and the server (`HEALTH_RECOVERY=unload` needs explicit model control),
lives here with the keys, so that every way to misconfigure the monitor fails the load with one sentence.
"""

from __future__ import annotations

import enum

from pydantic import Field, ValidationInfo, model_validator

from ..common.errors import ConfigError
from ..common.parameters import ParameterTable, Switch, choice, seconds


class Recovery(enum.Enum):
    FAIL = "fail"  # stay loaded, refuse requests until the engine answers again
    UNLOAD = "unload"  # unload the model (needs --model-control-mode=explicit)
    RESTART = "restart"  # replace the engine in place, with backoff, a bounded number of times


# In validation context: whether tritonserver runs with --model-control-mode=explicit (absent: not known, as in
# unit tests of other rules, and not checked).
EXPLICIT_MODEL_CONTROL = "explicit_model_control"
DEGRADED_PROBE_DEFAULT_S = 1.0


class HealthSettings(ParameterTable):
    enabled: Switch = Field(False, alias="ENABLE_VLLM_HEALTH_CHECK", description=(
        "`true` turns the health monitor on (same key as the official backend; see [Health](health.md))"))
    check_interval_s: float = seconds(5.0, "HEALTH_CHECK_INTERVAL_S", "period of the active engine probe")
    probe_timeout_s: float = seconds(5.0, "HEALTH_PROBE_TIMEOUT_S",
                                      "a probe without an answer after this long has failed")
    degraded_probe_s: float = seconds(DEGRADED_PROBE_DEFAULT_S, "HEALTH_DEGRADED_PROBE_S", (
        "a probe slower than this makes the state `degraded` (by default 1 s, or half the probe timeout if "
        "that is lower); must be below `HEALTH_PROBE_TIMEOUT_S`"))
    failure_threshold: int = Field(2, alias="HEALTH_FAILURE_THRESHOLD", gt=0, description=(
        "consecutive failed probes of an idle engine that make it `unhealthy`"))
    stall_timeout_s: float = seconds(30.0, "HEALTH_STALL_TIMEOUT_S", (
        "requests in flight but no engine step for this long: `unhealthy`. Also the longest engine step allowed: "
        "raise it where one step may take longer (a large model on CPU)."))
    recovery: choice(Recovery) = Field(Recovery.RESTART, alias="HEALTH_RECOVERY", description=(
        "what to do when unhealthy (see [Health](health.md)); `unload` needs tritonserver "
        "`--model-control-mode=explicit`"))
    restart_max_attempts: int = Field(3, alias="HEALTH_RESTART_MAX_ATTEMPTS", gt=0, description=(
        "restarts tried per incident before falling back"))
    restart_backoff_s: float = seconds(5.0, "HEALTH_RESTART_BACKOFF_S",
                                        "wait before the first restart, doubled for each further attempt")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> HealthSettings:
        """Settings that contradict each other would make the monitor misjudge the engine: fail the load."""
        if "degraded_probe_s" not in self.model_fields_set:  # a short probe timeout brings the default down
            # frozen: set once, here, while the model is being made
            self.__dict__["degraded_probe_s"] = min(DEGRADED_PROBE_DEFAULT_S, self.probe_timeout_s / 2)
        if self.degraded_probe_s >= self.probe_timeout_s:
            raise ConfigError(f"HEALTH_DEGRADED_PROBE_S ({self.degraded_probe_s:g}) must be less than "
                              f"HEALTH_PROBE_TIMEOUT_S ({self.probe_timeout_s:g}): a probe slower than the first is "
                              "degraded, one slower than the second failed")
        explicit = (info.context or {}).get(EXPLICIT_MODEL_CONTROL)
        if self.enabled and self.recovery is Recovery.UNLOAD and explicit is False:
            raise ConfigError(
                "HEALTH_RECOVERY=unload needs tritonserver --model-control-mode=explicit (unloading a model in "
                "any other mode can crash Triton); use restart or fail, or start the server in explicit mode")
        return self
