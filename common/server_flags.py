"""The tritonserver command line, read from the stub's parent process.

Some server settings change what the backend may do but are not passed to Python models: whether metrics
are allowed (`--allow-metrics`) and the model control mode (`pb_utils.unload_model` is only safe in explicit
mode). The stub is a child of tritonserver, so its parent's argv tells.
"""

from __future__ import annotations

import os

import psutil  # a dependency of vLLM, so present wherever the backend runs


def server_argv(pid: int | None = None) -> list[str]:
    try:
        return psutil.Process(pid or os.getppid()).cmdline()
    except psutil.Error:
        return []


def flag_value(argv: list[str], name: str) -> str | None:
    """The last value given for `--name=value` or `--name value`."""
    value = None
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def metrics_allowed(argv: list[str]) -> bool:
    value = flag_value(argv, "allow-metrics")
    return value is None or value.lower() not in ("false", "0", "no", "off")


def explicit_model_control(argv: list[str]) -> bool:
    return (flag_value(argv, "model-control-mode") or "none").lower() == "explicit"


def exit_timeout_s(argv: list[str]) -> float:
    """How long tritonserver waits for its models to unload when it exits (`--exit-timeout-secs`, 30 by default)."""
    try:
        return float(flag_value(argv, "exit-timeout-secs") or 30)
    except ValueError:
        return 30.0


def http_url(argv: list[str]) -> str | None:
    """Where the server's own HTTP endpoint listens, or None when HTTP is off."""
    allow = flag_value(argv, "allow-http")
    if allow is not None and allow.lower() in ("false", "0", "no", "off"):
        return None
    address = flag_value(argv, "http-address") or "0.0.0.0"
    host = "127.0.0.1" if address in ("0.0.0.0", "") else "[::1]" if address == "::" else address
    return f"http://{host}:{flag_value(argv, 'http-port') or 8000}"


def trace_config(argv: list[str]) -> dict[str, str]:
    """Every `--trace-config [section,]key=value`, as {"mode": ..., "opentelemetry,url": ..., ...}; last wins."""
    values = []
    for i, arg in enumerate(argv):
        if arg.startswith("--trace-config="):
            values.append(arg.split("=", 1)[1])
        elif arg == "--trace-config" and i + 1 < len(argv):
            values.append(argv[i + 1])
    return dict(value.split("=", 1) for value in values if "=" in value)
