"""PromQL building blocks, so every query follows the same rules (the lint in the tests enforces them):
rates over `$__rate_interval`, quantiles `sum by (le)`, ratios divided by `(x > 0)`, no `or vector(0)`."""

from __future__ import annotations

from vllm_triton_observable.metrics import names

# Selectors from the dashboard variables. vLLM's families carry `engine`; Triton's and the backend's do not.
TRITON = f'job=~"$job", instance=~"$instance", {names.MODEL}=~"$model"'
VLLM = TRITON + f', {names.ENGINE}=~"$engine"'


def sel(metric: str, selector: str, extra: str = "") -> str:
    inside = ", ".join(p for p in (selector, extra) if p)
    return f"{metric}{{{inside}}}" if inside else metric


def rate(metric: str, selector: str, extra: str = "", window: str = "$__rate_interval") -> str:
    return f"rate({sel(metric, selector, extra)}[{window}])"


def sum_rate(metric: str, selector: str, by: str = "", extra: str = "", window: str = "$__rate_interval") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({rate(metric, selector, extra, window)})"


def quantile(q: float, histogram: str, selector: str, by: str = "", window: str = "$__rate_interval") -> str:
    grouping = f"le, {by}" if by else "le"
    return f"histogram_quantile({q:g}, sum by ({grouping}) ({rate(histogram + '_bucket', selector, window=window)}))"


def ratio(numerator: str, denominator: str) -> str:
    """`a / b` that is empty, not infinite or NaN, while `b` is zero."""
    return f"({numerator}) / (({denominator}) > 0)"


def mean(histogram: str, selector: str, by: str = "") -> str:
    """Mean of a histogram over the window: rate of _sum over rate of _count."""
    return ratio(sum_rate(histogram + "_sum", selector, by), sum_rate(histogram + "_count", selector, by))


def error_ratio(vllm_selector: str, triton_selector: str, by: str = "", window: str = "$__rate_interval") -> str:
    """Failed over finished requests: vLLM's finished_reason="error" plus Triton's failures (cancellations
    excluded). `rate(a) or rate(b)` inside one sum keeps the ratio defined when either side has no series."""
    grouping = f" by ({by})" if by else ""
    triton_failures = rate(names.TRITON_FAILURE, triton_selector, f'{names.REASON}!="CANCELED"', window)
    vllm_errors = rate(names.VLLM_REQUEST_SUCCESS, vllm_selector, f'{names.FINISHED_REASON}="error"', window)
    vllm_finished = rate(names.VLLM_REQUEST_SUCCESS, vllm_selector, window=window)
    errors = f"sum{grouping} ({vllm_errors} or {triton_failures})"
    total = f"sum{grouping} ({vllm_finished} or {triton_failures})"
    return ratio(errors, total)


def age(timestamp: str, selector: str, by: str) -> str:
    """Seconds since a published Unix timestamp, computed by Prometheus: a backend that stops publishing ages."""
    return f"time() - max by ({by}) ({sel(timestamp, selector)})"


def attainment(histogram: str, selector: str, le: str, by: str = "") -> str:
    """Share of observations at or under the bucket `le` (an SLO's good events over all events)."""
    return ratio(sum_rate(histogram + "_bucket", selector, by, extra=f'le="{le}"'),
                 sum_rate(histogram + "_count", selector, by))
