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

# --- Node: the reference MCP server ------------------------------------------------------
everything=$tools/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js
if [ ! -f "$everything" ] && command -v npm >/dev/null; then
  log "installing @modelcontextprotocol/server-everything"
  npm install --silent --no-audit --no-fund --prefix "$tools/node" @modelcontextprotocol/server-everything >/dev/null
fi

export TOOLGATE_TEST_PYTHON=$tools/venv/bin/python
export TOOLGATE_TEST_EVERYTHING=$everything
export TOOLGATE_TEST_KUBERNETES_VALIDATE=$tools/venv/bin/kubernetes-validate
export PATH=$tools/bin:$PATH

log "cargo test"
cargo test --all-targets "$@"
