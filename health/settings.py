"""Health-monitor settings from config.pbtxt parameters, with safe defaults (see README)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any

from ..common.errors import ConfigError
from ..common.parameters import config_parameters, parse_bool, parse_positive


class Recovery(enum.Enum):
    FAIL = "fail"  # stay loaded, refuse requests until the engine answers again
    UNLOAD = "unload"  # unload the model (needs --model-control-mode=explicit)
    RESTART = "restart"  # replace the engine in place, with backoff, a bounded number of times


@dataclass(frozen=True)
class HealthSettings:
    enabled: bool = False
    check_interval_s: float = 5.0  # HEALTH_CHECK_INTERVAL_S: period of the active probe
    probe_timeout_s: float = 5.0  # HEALTH_PROBE_TIMEOUT_S: a probe slower than this failed
    degraded_probe_s: float = 1.0  # HEALTH_DEGRADED_PROBE_S: a probe slower than this means degraded
    failure_threshold: int = 2  # HEALTH_FAILURE_THRESHOLD: consecutive failed probes → unhealthy
    stall_timeout_s: float = 30.0  # HEALTH_STALL_TIMEOUT_S: requests in flight, no engine step for this long
    recovery: Recovery = Recovery.RESTART  # HEALTH_RECOVERY
    restart_max_attempts: int = 3  # HEALTH_RESTART_MAX_ATTEMPTS
    restart_backoff_s: float = 5.0  # HEALTH_RESTART_BACKOFF_S: first wait, doubled per attempt

    @classmethod
    def from_model_config(cls, model_config: dict[str, Any]) -> HealthSettings:
        params = config_parameters(model_config)
        values: dict[str, Any] = {
            "enabled": parse_bool("ENABLE_VLLM_HEALTH_CHECK", params.get("ENABLE_VLLM_HEALTH_CHECK", "false"))}
        for field in fields(cls):
            key = "HEALTH_" + field.name.upper()
            if field.name == "enabled" or key not in params:
                continue
            raw = params[key].strip()
            if field.name == "recovery":
                try:
                    values["recovery"] = Recovery(raw.lower())
                except ValueError:
                    raise ConfigError(f"config.pbtxt parameter {key}: {raw!r}; use fail, unload or restart") from None
                continue
            values[field.name] = parse_positive(key, raw, int if isinstance(field.default, int) else float)
        if "HEALTH_DEGRADED_PROBE_S" not in params:  # a short probe timeout brings the default threshold down
            values["degraded_probe_s"] = min(cls.degraded_probe_s, values.get("probe_timeout_s",
                                                                              cls.probe_timeout_s) / 2)
        settings = cls(**values)
        settings._check()
        return settings

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset({"ENABLE_VLLM_HEALTH_CHECK", *("HEALTH_" + f.name.upper() for f in fields(cls)
                                                         if f.name != "enabled")})

    def _check(self) -> None:
        """Settings that contradict each other would make the monitor misjudge the engine: fail the load."""
        if self.degraded_probe_s >= self.probe_timeout_s:
            raise ConfigError(f"HEALTH_DEGRADED_PROBE_S ({self.degraded_probe_s:g}) must be less than "
                              f"HEALTH_PROBE_TIMEOUT_S ({self.probe_timeout_s:g}): a probe slower than the first is "
                              "degraded, one slower than the second failed")
