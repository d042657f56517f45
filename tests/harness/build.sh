#!/usr/bin/env bash
# Builds the end-to-end harness binaries into $HARNESS_BIN (default .cache/harness/bin):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (control-plane module),
# nhc (NodeHealthCheck v0.12.0) and helm (v3.22.0), each from its own Go module. A no-op when current.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${HARNESS_BIN:-$root/.cache/harness/bin}
mkdir -p "$bin"

export GOFLAGS="${GOFLAGS:-} -trimpath"
ldflags="-s -w"

log() { printf '[harness %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# build NAME STAMP-INPUT COMMAND...: runs COMMAND unless $bin/NAME exists and was built from the same inputs.
build() {
  local name=$1 inputs=$2; shift 2
  local stamp="$bin/.$name.stamp" want
  want=$(printf '%s\n%s\n' "$(go env GOVERSION)" "$inputs" | sha256sum | cut -d' ' -f1)
  if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  log "building $name"
  local start=$SECONDS
  "$@"
  echo "$want" >"$stamp"
  log "built $name in $((SECONDS - start))s"
}

module_inputs() { cat "$1/go.mod" "$1/go.sum" "$1"/*.go 2>/dev/null; }

build etcd "$(module_inputs "$here/etcd")" \
  bash -c "cd '$here/etcd' && go build -ldflags='$ldflags' -o '$bin/etcd' ."

for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build "$cmd" "$(module_inputs "$here/controlplane")" \
    bash -c "cd '$here/controlplane' && go build -ldflags='$ldflags' -o '$bin/$cmd' k8s.io/kubernetes/cmd/$cmd"
done

# NHC and helm pin other k8s.io versions, so each is built from its own small module (see their go.mod).
build nhc "$(module_inputs "$here/nhc")" \
  bash -c "cd '$here/nhc' && go build -ldflags='$ldflags' -o '$bin/nhc' github.com/medik8s/node-healthcheck-operator/cmd"
build helm "$(module_inputs "$here/helm")" \
  bash -c "cd '$here/helm' && go build -ldflags='$ldflags' -o '$bin/helm' helm.sh/helm/v3/cmd/helm"
log "harness binaries current in $bin"
