#!/usr/bin/env bash
# Runs the end-to-end suite (make e2e): the harness binaries and peers must be built (the Makefile does).
set -euo pipefail
cd "$(dirname "$0")/../.."
CORONER_E2E=1 cargo test --test e2e -- "$@"
