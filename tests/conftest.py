"""Shared test setup: the repository's packages and scripts importable, and the order of a parallel run.

`make test` runs the suite in two pytest-xdist workers (`--dist loadgroup`). Every test that uses a shared
server goes to the one worker that starts it (group "explicit" or "shared"); the other integration modules start
servers of their own per module and stay together (group = module). The longest groups are handed out first.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# The explicit-mode server's group first, on one worker; the other worker runs the modules with servers of their own
# and then the shared default-mode server's group, so that no more than two servers' engines are up at once (each
# engine takes ≈ 2.3 GB; see docs/development.md "Tests"). The residue and official-suite modules start servers of
# their own while the explicit server runs, before the shared server is up (a session fixture: it stays up to the
# end). The small single-engine modules come last: whichever worker is free first takes them, which evens out the two
# workers' ends (≈ 95 s apart when they came before the shared server).
# Kept in this order by --no-loadscope-reorder.
# The modules that touch a vLLM API or behaviour (engine arguments, metric families and exact deltas, the stat-logger
# guard, warm-up, health kill/stop, embeddings, LoRA, tracing headers, the bad-input corpus, unload, the sampling
# parameters built from a request): marked
# `vllm_api`, they run on the second vLLM of `make test` too (Makefile test-compat). The others test the project's
# own tools (dashboards, alerts, Kubernetes, docs, bench, launcher), which the vLLM release does not change.
VLLM_API_MODULES = {"test_engine_args", "test_metrics_pipeline", "test_vllm_compat", "test_generation_service",
                    "test_generate", "test_metrics", "test_health", "test_embeddings", "test_lifecycle",
                    "test_reliability", "test_tracing", "test_model_config", "test_infer", "test_samples",
                    "test_official_suites", "test_request_decoding", "test_shared_engine"}
# Of those, tests that repeat another's vLLM work for the backend's own sake: not run again on the second vLLM.
# The load/unload leak test is five cycles of what the first unload test does once (≈ 5 min on two cores).
NOT_VLLM_API_TESTS = {"test_load_unload_cycles_leak_nothing"}
GROUP_ORDER = ("explicit", "test_residue", "test_official_suites", "test_model_config", "test_serve", "test_ensemble",
               "test_tracing", "test_fleet", "test_bench", "shared", "test_embeddings", "test_batched_admission",
               "test_shared_engine", "test_profile")


def group_of(item: pytest.Item) -> str | None:
    if "explicit_server" in item.fixturenames:
        return "explicit"
    if "server" in item.fixturenames:
        return "shared"
    if "integration" in item.path.parts:
        return item.path.stem
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        group = group_of(item)
        return GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)

    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if item.path.stem in VLLM_API_MODULES and item.originalname not in NOT_VLLM_API_TESTS:
            item.add_marker(pytest.mark.vllm_api)
    items.sort(key=rank)  # stable: the order within a group is the collection order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the figures tests report with `record_property("report", text)` (workers' output is not shown)."""
    if report.when == "call":
        REPORTED.extend(text for name, text in report.user_properties if name == "report")


def pytest_terminal_summary(terminalreporter) -> None:
    for text in REPORTED:
        terminalreporter.write_line(text)


REPORTED: list[str] = []
