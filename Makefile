# Every target runs scripts/setup.sh first: it is idempotent and takes seconds once the venv exists.
SHELL := /bin/bash
.PHONY: setup serve test test-unit lint dashboards alerts kubernetes docs bench profile soak genai-perf install-backend clean

setup:
	@bash scripts/setup.sh

serve: setup
	@source scripts/env.sh && exec python scripts/triton_launcher.py

test: setup
	@bash scripts/ensure_prometheus.sh
	@bash scripts/ensure_perf_tools.sh
	@bash scripts/test.sh $(PYTEST_ARGS)

test-unit: setup
	@source scripts/env.sh && python -m pytest -q tests/unit $(PYTEST_ARGS)

lint: setup
	@source scripts/env.sh && ruff check .

# The Kubernetes base embeds the dashboards and the rules: regenerated with them.
dashboards: setup
	@source scripts/env.sh && python -m dashboards.build && python -m deploy.build

alerts: setup
	@source scripts/env.sh && python -m alerts.build && python -m deploy.build

kubernetes: setup
	@source scripts/env.sh && python -m deploy.build

# docs/metrics.md, the metric reference, from the installed vLLM (after upgrading it).
docs: setup
	@source scripts/env.sh && python -m vllm_triton_observable.metrics.catalogue docs/metrics.md

bench: setup
	@source scripts/env.sh && python scripts/bench.py $(BENCH_ARGS)

# make profile: CPU and context switches per token per process, perf's split of tritonserver and the stub, py-spy's
# of the stub's Python, under the benchmark's load (PROFILE_ARGS, e.g. "--protocol grpc --trace"); .bench/profile.json.
profile: setup
	@source scripts/env.sh && python scripts/profile_serving.py $(PROFILE_ARGS)

# make soak [DURATION=600]: mixed load, cancellations, bad requests and scrapes; writes .soak/latest.json.
soak: setup
	@source scripts/env.sh && python scripts/soak.py --duration $(or $(DURATION),600) $(SOAK_ARGS)

# make genai-perf [CONCURRENCY=8] [URL=localhost:8001]: genai-perf's table for the sample model (or the server at
# URL); artifacts in .genai-perf/. GENAI_PERF_ARGS passes more options (see scripts/perf_tools.py --help).
genai-perf: setup
	@bash scripts/ensure_perf_tools.sh
	@source scripts/env.sh && python scripts/perf_tools.py --concurrency $(or $(CONCURRENCY),8) \
		$(if $(URL),--url $(URL)) $(GENAI_PERF_ARGS)

clean:
	rm -rf .build .bench .soak .genai-perf

install-backend: setup
	@test -n "$(DEST)" || { echo "usage: make install-backend DEST=/opt/tritonserver/backends/vllm"; exit 2; }
	@source scripts/env.sh && python scripts/assemble_backends.py --vllm-only "$(DEST)"
