#!/usr/bin/env bash
# Smoke test of the real control plane (cluster.sh) and the simulated kubelet (node-agent):
# node registration and lease, a Deployment's pod Running, power Off → Ready=Unknown + unreachable
# taint, out-of-service taint → pod force-deleted and rescheduled on a second node, power On → new
# boot, then `cluster.sh down` leaves no process behind. Prints the measured timings.
#   SMOKE_DIR  work directory (default .cache/smoke; removed at the end)
#   KEEP=1     on failure leave the cluster and agents running for inspection
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${HARNESS_BIN:-$root/.cache/harness/bin}
work=${SMOKE_DIR:-$root/.cache/smoke}
cluster_dir=$work/cluster
kubectl="$bin/kubectl"
export NODE_MONITOR_GRACE_PERIOD=${NODE_MONITOR_GRACE_PERIOD:-8s}
grace=${NODE_MONITOR_GRACE_PERIOD%s}

ms() { date +%s%3N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f s", (b-a)/1000}'; }
log() { printf '[smoke %s] %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
timings=()
record() { timings+=("$(printf '%-48s %s' "$1" "$2")"); log "$1: $2"; }

agent_pids=()
cleanup() {
  local rc=$?
  if ((rc != 0)); then
    log "FAILED (rc $rc)"
    for f in "$work"/*.log; do [[ -f $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
    [[ ${KEEP:-} == 1 ]] && { log "KEEP=1: leaving cluster in $cluster_dir and agents ${agent_pids[*]:-} running"; exit "$rc"; }
  fi
  for pid in "${agent_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  if [[ -d $cluster_dir ]]; then "$here/cluster.sh" down "$cluster_dir" || true; fi
  exit "$rc"
}
trap cleanup EXIT

# wait_until DESC TIMEOUT_S COMMAND...: polls COMMAND every 0.2 s.
wait_until() {
  local desc=$1 deadline=$(($(ms) + $2 * 1000))
  shift 2
  until "$@" >/dev/null 2>&1; do
    (($(ms) < deadline)) || { log "timed out waiting for $desc"; return 1; }
    sleep 0.2
  done
}
k() { "$kubectl" "$@"; }
alive() { local s; s=$(ps -o stat= -p "$1") && [[ $s != *Z* ]]; } # a zombie awaiting its reaper counts as gone
ready() { k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
is_ready() { [[ $(ready "$1") == "$2" ]]; }
# No `cmd | grep -q` under pipefail: grep exiting early can SIGPIPE cmd and fail the pipeline.
has_taint() { local t; t=$(k get node "$1" -o jsonpath='{range .spec.taints[*]}{.key}:{.effect}{"\n"}{end}') && grep -qx "$2" <<<"$t"; }
boot_id() { k get node "$1" -o jsonpath='{.status.nodeInfo.bootID}'; }
# pods of the Deployment as "name node phase deletionTimestamp" lines
pods() { k get pods -l app=smoke -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}'; }
running_on() { pods | awk -v n="$1" '$2 == n && $3 == "Running" && $4 == "" {found=1} END {exit !found}'; }
pod_gone() { local p; p=$(pods) && ! grep -q "^$1 " <<<"$p"; }
power() { printf '%s\n' "$2" >"$work/$1.power.tmp" && mv "$work/$1.power.tmp" "$work/$1.power"; } # atomic, like the BMC bridge
start_agent() { # start_agent NODE UUID
  power "$1" On
  setsid "$bin/node-agent" --kubeconfig="$KUBECONFIG" --node="$1" --system-uuid="$2" \
    --power-state-file="$work/$1.power" --partition-file="$work/$1.partition" \
    --labels="harness.coroner.dev/smoke=true" </dev/null 2>"$work/$1.log" &
  agent_pids+=($!)
}

[[ -x $bin/node-agent ]] || { log "$bin/node-agent missing; build it (see CLUSTER.md)"; exit 1; }
[[ ! -e $cluster_dir ]] || "$here/cluster.sh" down "$cluster_dir"
rm -rf "$work" && mkdir -p "$work"

t=$(ms)
KUBECONFIG=$("$here/cluster.sh" up "$cluster_dir" | tail -n 1)
export KUBECONFIG
record "cluster up (clean dir)" "$(secs "$t" "$(ms)")"

t=$(ms)
start_agent smoke-1 7f3b0c1e-0000-4000-8000-000000000001
wait_until "smoke-1 Ready" 30 is_ready smoke-1 True
wait_until "smoke-1 Lease" 10 k -n kube-node-lease get lease smoke-1
record "node Ready=True + Lease after agent start" "$(secs "$t" "$(ms)")"
# The agent registers with the not-ready:NoSchedule taint (TaintNodesByCondition); KCM lifts it.
wait_until "not-ready taint lifted" 30 bash -c "! $kubectl get node smoke-1 -o jsonpath='{.spec.taints[*].key}' | grep -q not-ready"

t=$(ms)
k create deployment smoke --image=registry.invalid/pause --replicas=1 >/dev/null
wait_until "pod Running on smoke-1" 60 running_on smoke-1
record "Deployment pod Running on smoke-1" "$(secs "$t" "$(ms)")"
pod1=$(pods | awk '{print $1}')
boot1=$(boot_id smoke-1)

# A second machine for the pod to move to (started only now, so the first pod surely lands on smoke-1).
start_agent smoke-2 7f3b0c1e-0000-4000-8000-000000000002
wait_until "smoke-2 Ready" 30 is_ready smoke-2 True

t=$(ms)
power smoke-1 Off
wait_until "smoke-1 Ready=Unknown" $((grace + 20)) is_ready smoke-1 Unknown
record "Ready=Unknown after Off (grace ${grace}s)" "$(secs "$t" "$(ms)")"
wait_until "unreachable:NoExecute taint" 20 has_taint smoke-1 node.kubernetes.io/unreachable:NoExecute
record "unreachable:NoExecute taint after Off" "$(secs "$t" "$(ms)")"
renew=$(k -n kube-node-lease get lease smoke-1 -o jsonpath='{.spec.renewTime}')
sleep 2
[[ $(k -n kube-node-lease get lease smoke-1 -o jsonpath='{.spec.renewTime}') == "$renew" ]] || { log "lease renewed while Off"; exit 1; }
# The pod tolerates unreachable for 300 s (DefaultTolerationSeconds), so it is still bound to smoke-1.
grep -q "^$pod1 smoke-1 " <<<"$(pods)" || { log "pod $pod1 left smoke-1 before the out-of-service taint"; exit 1; }

t=$(ms)
k taint node smoke-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute >/dev/null
wait_until "replacement pod Running on smoke-2" 60 running_on smoke-2
record "replacement Running on smoke-2 after OOS taint" "$(secs "$t" "$(ms)")"
wait_until "old pod $pod1 force-deleted" 60 pod_gone "$pod1"
record "old pod force-deleted after OOS taint" "$(secs "$t" "$(ms)")"
# The agent is Off, so only KCM's pod GC can have removed it: check its out-of-service counter.
pki=$cluster_dir/pki
metrics=$(curl -fsSk --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:${KCM_PORT:-20257}/metrics") # KCM's cert is self-signed
grep -q '^pod_gc_collector_force_delete_pods_total{namespace="default",reason="out-of-service"} 1$' <<<"$metrics" ||
  { log "KCM pod GC did not report an out-of-service force deletion"; exit 1; }

t=$(ms)
power smoke-1 On
wait_until "smoke-1 Ready=True with a new bootID" 30 \
  bash -c "[[ \$($kubectl get node smoke-1 -o jsonpath='{.status.nodeInfo.bootID}') != '$boot1' ]] && \
    [[ \$($kubectl get node smoke-1 -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"
record "Ready=True with new bootID after On" "$(secs "$t" "$(ms)")"
wait_until "unreachable taints lifted" 30 bash -c "! $kubectl get node smoke-1 -o jsonpath='{.spec.taints[*].key}' | grep -q unreachable"
has_taint smoke-1 node.kubernetes.io/out-of-service:NoExecute || { log "agent must not touch the out-of-service taint"; exit 1; }

# Teardown: agents, then the control plane; every pid we started must be gone.
cluster_pids=$(cat "$cluster_dir"/pids/*.pid)
for pid in "${agent_pids[@]}"; do kill -TERM "$pid"; done
for pid in "${agent_pids[@]}"; do while alive "$pid"; do sleep 0.1; done; done
t=$(ms)
"$here/cluster.sh" down "$cluster_dir"
record "cluster down" "$(secs "$t" "$(ms)")"
for pid in $cluster_pids "${agent_pids[@]}"; do
  ! alive "$pid" || { log "pid $pid still running"; exit 1; }
done
[[ ! -e $cluster_dir ]] || { log "$cluster_dir still exists"; exit 1; }
agent_pids=()
rm -rf "$work"

echo "smoke test passed:"
printf '  %s\n' "${timings[@]}"
