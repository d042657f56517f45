#!/usr/bin/env bash
# Builds the end-to-end harness binaries into $HARNESS_BIN (default .cache/harness/bin):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (control-plane module),
# node-agent (the simulated kubelet), nhc (NodeHealthCheck v0.12.0) and helm (v3.22.0), each from
# its own Go module. A no-op when current.
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

# The release ldflags: without them /version reports v0.0.0 and helm's kubeVersion checks fail.
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/controlplane/go.mod")
k8s_minor=$(cut -d. -f2 <<<"$k8s_version")
version_pkg=k8s.io/component-base/version
k8s_ldflags="$ldflags -X $version_pkg.gitVersion=$k8s_version -X $version_pkg.gitMajor=1 -X $version_pkg.gitMinor=$k8s_minor"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build "$cmd" "$(module_inputs "$here/controlplane"; echo "$k8s_ldflags")" \
    bash -c "cd '$here/controlplane' && go build -ldflags='$k8s_ldflags' -o '$bin/$cmd' k8s.io/kubernetes/cmd/$cmd"
done
# The simulated kubelet of the end-to-end suite, on the control plane's pinned client-go.
build node-agent "$(module_inputs "$here/controlplane"; cat "$here/controlplane/cmd/node-agent/"*.go)" \
  bash -c "cd '$here/controlplane' && go build -ldflags='$ldflags' -o '$bin/node-agent' ./cmd/node-agent"

# NHC and helm pin other k8s.io versions, so each is built from its own small module (see their go.mod).
build nhc "$(module_inputs "$here/nhc")" \
  bash -c "cd '$here/nhc' && go build -ldflags='$ldflags' -o '$bin/nhc' github.com/medik8s/node-healthcheck-operator/cmd"
# Like helm's release build: its default Kubernetes version (for helm template and lint) is the
# client-go minor it is built with, not v1.20.
helm_minor=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$here/helm/go.mod" | cut -d. -f2)
helm_ldflags="$ldflags"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ldflags="$helm_ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_minor"
done
build helm "$(module_inputs "$here/helm"; echo "$helm_ldflags")" \
  bash -c "cd '$here/helm' && go build -ldflags='$helm_ldflags' -o '$bin/helm' helm.sh/helm/v3/cmd/helm"
log "harness binaries current in $bin"
