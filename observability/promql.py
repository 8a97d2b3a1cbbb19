"""PromQL building blocks, so every query follows the same rules (the lint in the tests enforces them):
rates over `$__rate_interval`, quantiles `sum by (le)`, ratios divided by `(x > 0)`, no `or vector(0)`."""

from __future__ import annotations

from vllm_triton_observable.common.vocabulary import Outcome
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


# Triton's failure reason for requests it refused before any backend saw them (queue full, queue timeout).
TRITON_REFUSED = "REJECTED"
# The outcomes of requests the server answered on their merits (bad input and client cancellations excluded).
ANSWERED = f'{names.OUTCOME}=~"{Outcome.COMPLETED.value}|{Outcome.FAILED.value}"'


def error_ratio(selector: str, by: str = "", window: str = "$__rate_interval") -> str:
    """The server's share of failed requests, from the outcomes the backend counts: failed over completed + failed
    (rejected input and client cancellations are the client's doing), plus the requests Triton refused before the
    backend saw them. Triton's other failure counts are left out: it counts a decoupled model's error responses as
    successes, and its BACKEND failures are this backend's, already counted. `rate(a) or rate(b)` inside one sum
    keeps the ratio defined when either side has no series."""
    grouping = f" by ({by})" if by else ""
    failed = rate(names.REQUESTS_FINISHED, selector, f'{names.OUTCOME}="{Outcome.FAILED.value}"', window)
    answered = rate(names.REQUESTS_FINISHED, selector, ANSWERED, window)
    refused = rate(names.TRITON_FAILURE, selector, f'{names.REASON}="{TRITON_REFUSED}"', window)
    return ratio(f"sum{grouping} ({failed} or {refused})", f"sum{grouping} ({answered} or {refused})")


def age(timestamp: str, selector: str, by: str) -> str:
    """Seconds since a published Unix timestamp, computed by Prometheus: a backend that stops publishing ages."""
    return f"time() - max by ({by}) ({sel(timestamp, selector)})"


def le_matcher(le: str) -> str:
    """The bucket `le` (Triton's spelling, metrics.registry.triton_le_label: `60`) in either spelling.

    Triton's histogram families write a bound as `60` where vLLM's exposition (and a histogram published as its
    series) writes `60.0`; Prometheus 3 normalizes both to `60.0` when it scrapes, Prometheus 2 keeps what it read.
    """
    return f'le=~"{le}(\\\\.0)?"'


def attainment(histogram: str, selector: str, le: str, by: str = "") -> str:
    """Share of observations at or under the bucket `le` (an SLO's good events over all events)."""
    return ratio(sum_rate(histogram + "_bucket", selector, by, extra=le_matcher(le)),
                 sum_rate(histogram + "_count", selector, by))
