#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus + promtool) if missing: the alert and dashboard tests run
# promtool and a real Prometheus. The package's own service is never started (the tests start their own).
set -euo pipefail
source "$(dirname "$0")/env.sh"
STEP=setup
if [ -n "$EXISTING_ENV" ]; then  # PYTHON=...: install nothing; check_env.py has said what is missing
  say "PYTHON is set: not installing prometheus and promtool"
  exit 0
fi
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  say "prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}') present"
  exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
say "installing Debian's prometheus package (promtool + prometheus; ≈ 1 min)"
# policy-rc.d 101: do not start the packaged service during installation.
policy=/usr/sbin/policy-rc.d
created=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null; $SUDO chmod +x "$policy"; created=1
fi
trap '[ "$created" = 1 ] && $SUDO rm -f "$policy"' EXIT
log="$BUILD/apt.log"; mkdir -p "$BUILD"
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus; } >"$log" 2>&1; then
  tail -n 20 "$log"; say "apt-get install prometheus failed (see .build/apt.log)"; exit 1
fi
say "prometheus installed"
