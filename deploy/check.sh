#!/usr/bin/env bash
# Checks the deployment files; idempotent, installs what it needs.
#   bash deploy/check.sh
# 1. systemd-analyze verify on the unit (on a copy whose ExecStart points at a
#    stub when /usr/local/bin/deno is missing here: verify wants it to exist).
# 2. systemd-analyze security --offline=yes: prints the exposure; fails above 5.0.
# 3. The Kubernetes manifests against the Kubernetes API schemas, offline:
#    kubernetes-models (npm, through Deno) always; kubernetes-validate --strict
#    (PyPI) as well where PyPI is reachable.
# 4. promtool check rules on the alert rules (Debian's prometheus package);
#    their unit tests and the dashboard's queries run in
#    tests/deploy/monitoring_test.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
UNIT=deploy/systemd/mymodel-serve.service
MAX_EXPOSURE=5.0
tmp=$(mktemp -d)
# A fresh machine has Deno only through npm.
command -v deno >/dev/null || deno() { npx --yes deno@2.9.6 "$@"; }
trap 'rm -rf "$tmp"' EXIT

if ! command -v systemd-analyze >/dev/null; then
  echo "installing systemd (for systemd-analyze)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi

# --- 1. verify -----------------------------------------------------------------
copy="$tmp/mymodel-serve.service"
cp "$UNIT" "$copy"
deno_path=$(sed -n 's|^ExecStart=\([^ ]*\).*|\1|p' "$UNIT")
if [ ! -x "$deno_path" ]; then
  mkdir -p "$tmp/bin"
  printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/deno"
  chmod +x "$tmp/bin/deno"
  sed -i "s|^ExecStart=$deno_path|ExecStart=$tmp/bin/deno|" "$copy"
  echo "systemd verify: $deno_path does not exist here; verifying a copy whose ExecStart is a stub"
fi
out=$(systemd-analyze verify "$copy" 2>&1) || { echo "$out"; echo "systemd verify: FAILED"; exit 1; }
# verify reports some problems as warnings with exit 0: any line about the unit fails too.
if printf '%s\n' "$out" | grep -q "mymodel-serve"; then
  echo "$out"
  echo "systemd verify: FAILED (warnings)"
  exit 1
fi
echo "systemd verify: ok"

# --- 2. security ---------------------------------------------------------------
exposure=$(systemd-analyze security --offline=yes "$UNIT" 2>/dev/null |
  sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
if [ -z "$exposure" ]; then
  echo "systemd security: could not read the exposure level"
  exit 1
fi
echo "systemd security: exposure $exposure (limit $MAX_EXPOSURE)"
awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e <= m) }' || {
  echo "systemd security: FAILED: exposure $exposure above $MAX_EXPOSURE"
  exit 1
}

# --- 3. Kubernetes -------------------------------------------------------------
deno run --config deno.dev.json --quiet --allow-read --allow-env deploy/validate_kubernetes.ts 2>&1 |
  grep -v DeprecationWarning || { echo "kubernetes (kubernetes-models): FAILED"; exit 1; }
echo "kubernetes (kubernetes-models): ok"

venv="${XDG_CACHE_HOME:-$HOME/.cache}/mymodel-serve/kubernetes-validate"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv" >/dev/null 2>&1 || true
  timeout 120 "$venv/bin/pip" install --quiet --disable-pip-version-check \
    --retries 0 --timeout 10 kubernetes-validate >/dev/null 2>&1 || true
fi
if [ -x "$venv/bin/kubernetes-validate" ]; then
  "$venv/bin/kubernetes-validate" --strict deploy/kubernetes/*.yaml
  echo "kubernetes (kubernetes-validate --strict): ok"
else
  echo "kubernetes (kubernetes-validate): not installable here (PyPI unreachable); kubernetes-models ran instead"
fi

# --- 4. alert rules ------------------------------------------------------------
if ! command -v promtool >/dev/null; then
  echo "installing prometheus (for promtool)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool check rules deploy/prometheus/alerts.yml || { echo "prometheus rules: FAILED"; exit 1; }
echo "prometheus rules: ok"
echo "deploy checks: ok"
