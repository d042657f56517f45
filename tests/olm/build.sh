#!/usr/bin/env bash
# Builds the OLM bundle validator (this module, github.com/operator-framework/api v0.45.0) into
# $HARNESS_BIN/olm-validate (default .cache/harness/bin). A no-op when current: the stamp hashes the
# Go version and this module's go.mod, go.sum and sources, as tests/harness/build.sh does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${HARNESS_BIN:-$root/.cache/harness/bin}
mkdir -p "$bin"

stamp="$bin/.olm-validate.stamp"
want=$(cat <(go env GOVERSION) "$here/go.mod" "$here/go.sum" "$here"/*.go | sha256sum | cut -d' ' -f1)
if [[ -x "$bin/olm-validate" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
echo "[olm] building olm-validate" >&2
start=$SECONDS
(cd "$here" && GOFLAGS="${GOFLAGS:-} -trimpath" go build -ldflags='-s -w' -o "$bin/olm-validate" .)
echo "$want" >"$stamp"
echo "[olm] built olm-validate in $((SECONDS - start))s" >&2
