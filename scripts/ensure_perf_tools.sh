#!/usr/bin/env bash
# Installs Triton's benchmark tools into .build/perf-tools, idempotently: perf_analyzer (from the tritonclient
# 2.51 wheel), genai-perf, and the two shared libraries perf_analyzer needs (libb64 from Debian's libb64-0d,
# unpacked here without installing it system-wide; libcudart.so.12 from PyPI). scripts/perf_tools.py runs them.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STEP=setup
if [ -n "$EXISTING_ENV" ]; then  # PYTHON=...: install nothing; check_env.py has said what is missing
  say "PYTHON is set: not installing perf_analyzer and genai-perf"
  exit 0
fi
TOOLS="$BUILD/perf-tools"
REQ="$ROOT/requirements/perf-tools.txt"
log="$BUILD/perf-tools.log"; mkdir -p "$BUILD"

stamp="$TOOLS/.requirements.sha"
want="$(cat "$REQ" "$0" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing perf_analyzer and genai-perf into .build/perf-tools (first time ≈ 1 min; log: .build/perf-tools.log)"
  rm -rf "$TOOLS"
  python3.11 -m venv "$TOOLS" >"$log" 2>&1
  if ! "$TOOLS/bin/python" -m pip install -q -r "$REQ" >>"$log" 2>&1; then
    tail -n 30 "$log"; say "pip install of the benchmark tools failed (see .build/perf-tools.log)"; exit 1
  fi
  deb="$TOOLS/deb"; mkdir -p "$deb"
  # apt-get download needs the package lists; refresh them once if the package is unknown.
  if ! (cd "$deb" && apt-get download libb64-0d >>"$log" 2>&1); then
    apt-get update -qq >>"$log" 2>&1 || true
    (cd "$deb" && apt-get download libb64-0d >>"$log" 2>&1) || {
      tail -n 20 "$log"; say "could not download Debian's libb64-0d (see .build/perf-tools.log)"; exit 1; }
  fi
  dpkg-deb -x "$deb"/libb64-0d_*.deb "$TOOLS/libb64"
  echo "$want" >"$stamp"
else
  say "perf_analyzer and genai-perf up to date"
fi
