#!/usr/bin/env bash
# make demo: one node dies on a local control plane, and coroner's fence is shown step by step.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORONER_E2E=1 cargo test -q --test e2e -- demo
