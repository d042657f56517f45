#!/usr/bin/env bash
# A real, single-host Kubernetes control plane for the end-to-end harness: etcd, kube-apiserver,
# kube-controller-manager (default controllers, short node-monitor grace period) and kube-scheduler,
# all on 127.0.0.1, from the binaries build.sh puts in $HARNESS_BIN. No kubelet: nodes are simulated
# by node-agent. See CLUSTER.md.
#
#   cluster.sh up   [DIR]  start (idempotent); last stdout line is the admin kubeconfig path
#   cluster.sh down [DIR]  stop every process it started (by pid) and remove DIR
#   cluster.sh env  [DIR]  print `export KUBECONFIG=...`
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${HARNESS_BIN:-$root/.cache/harness/bin}

cmd=${1:-}
dir=$(realpath -m "${2:-$root/.cache/cluster}")
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-20257}
SCHEDULER_PORT=${SCHEDULER_PORT:-20259}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
NODE_MONITOR_GRACE_PERIOD=${NODE_MONITOR_GRACE_PERIOD:-8s}
UP_TIMEOUT=${UP_TIMEOUT:-120}

# Stop order (reverse of start order).
components=(kube-scheduler kube-controller-manager kube-apiserver etcd)
marker=.coroner-harness-cluster # only a directory holding this file is ever removed by `down`

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid_of NAME: prints the pid from DIR/pids/NAME.pid if that process is alive, is NAME and was started
# for this DIR (every component's arguments name DIR), else nothing. Guards against pid reuse and does
# not depend on $HARNESS_BIN; a zombie (empty cmdline) counts as gone.
pid_of() {
  local f="$dir/pids/$1.pid" pid
  [[ -f $f ]] || return 0
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "${1:0:15}" ]] || return 0
  if tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/"; then
    echo "$pid"
  fi
}

port_free() { [[ -z $(ss -Hltn "sport = :$1") ]]; }

# first_ip CIDR: the first usable address of an IPv4 CIDR (the kubernetes Service's ClusterIP).
first_ip() {
  local ip=${1%/*} bits=${1#*/} a b c d n
  IFS=. read -r a b c d <<<"$ip"
  n=$(( ((a << 24) | (b << 16) | (c << 8) | d) & (0xffffffff << (32 - bits)) & 0xffffffff ))
  n=$((n + 1))
  echo "$((n >> 24 & 255)).$((n >> 16 & 255)).$((n >> 8 & 255)).$((n & 255))"
}

# cert NAME SUBJECT EKU [SAN]: an ECDSA P-256 key and a certificate signed by the cluster CA
# (or by $CA if set).
cert() {
  local name=$1 subj=$2 eku=$3 san=${4:-} ext="$dir/pki/$1.ext" ca=${CA:-ca}
  [[ -f $dir/pki/$name.crt ]] && return 0
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -n $san ]] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subj" \
    -keyout "$dir/pki/$name.key" -out "$dir/pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/$ca.crt" -CAkey "$dir/pki/$ca.key" \
    -CAcreateserial -days 3650 -extfile "$ext" -out "$dir/pki/$name.crt" 2>/dev/null
  rm -f "$dir/pki/$name.csr" "$ext"
}

# kubeconfig NAME USER: a self-contained kubeconfig (certificates embedded) for a client cert.
kubeconfig() {
  local b64='base64 -w0'
  cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: harness
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $($b64 <"$dir/pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 <"$dir/pki/$1.crt")
    client-key-data: $($b64 <"$dir/pki/$1.key")
contexts:
- name: harness
  context: {cluster: harness, user: $2}
current-context: harness
EOF
}

pki() {
  mkdir -p "$dir/pki"
  if [[ ! -f $dir/pki/ca.crt ]]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=coroner-harness-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" 2>/dev/null
  fi
  cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:$(first_ip "$SERVICE_CIDR"),DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # Front-proxy (request-header) CA: without it the extension-apiserver-authentication ConfigMap has
  # no requestheader bundle and KCM/scheduler's delegated authentication logs errors forever.
  if [[ ! -f $dir/pki/front-proxy-ca.crt ]]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=coroner-harness-front-proxy-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -keyout "$dir/pki/front-proxy-ca.key" -out "$dir/pki/front-proxy-ca.crt" 2>/dev/null
  fi
  CA=front-proxy-ca cert front-proxy-client "/CN=front-proxy-client" clientAuth
  cert admin "/O=system:masters/CN=harness-admin" clientAuth
  cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
  # Service-account tokens: the apiserver signs with sa.key and verifies with sa.pub; KCM's token
  # controller uses sa.key too.
  if [[ ! -f $dir/pki/sa.key ]]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/pki/sa.key" 2>/dev/null
    openssl pkey -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub"
  fi
  chmod 600 "$dir"/pki/*.key
  kubeconfig admin harness-admin
  kubeconfig kube-controller-manager system:kube-controller-manager
  kubeconfig kube-scheduler system:kube-scheduler
}

# check_ports: before starting anything, every component that is not running needs its binary and free ports.
check_ports() {
  local -A ports=([etcd]="$ETCD_PORT $ETCD_PEER_PORT" [kube-apiserver]=$APISERVER_PORT
    [kube-controller-manager]=$KCM_PORT [kube-scheduler]=$SCHEDULER_PORT)
  local c p
  for c in "${components[@]}"; do
    [[ -z $(pid_of "$c") ]] || continue
    [[ -x $bin/$c ]] || die "$bin/$c missing: run tests/harness/build.sh"
    for p in ${ports[$c]}; do
      port_free "$p" || die "port $p for $c is in use (override with the env vars in CLUSTER.md): $(ss -Hltnp "sport = :$p" | head -1)"
    done
  done
}

# start NAME ARGS...: starts $bin/NAME detached (own session, so it outlives this script) unless it
# is already running.
start() {
  local name=$1 pid
  shift
  if [[ -n $(pid_of "$name") ]]; then return 0; fi
  setsid "$bin/$name" "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/pids/$name.pid"
  # Until the background shell has exec'd the binary, pid_of does not recognise the pid and would
  # report the component as exited: wait for the exec (or for the process to end).
  local i
  for ((i = 0; i < 200; i++)); do
    [[ -n $(pid_of "$name") ]] || ! kill -0 "$pid" 2>/dev/null && break
    sleep 0.05
  done
  log "started $name (pid $pid)"
}

# wait_for WHAT COMMAND...: retries COMMAND until it succeeds, failing when a component died or on timeout.
wait_for() {
  local what=$1 deadline=$((SECONDS + UP_TIMEOUT)) c
  shift
  until "$@" >/dev/null 2>&1; do
    for c in "${components[@]}"; do
      [[ -f $dir/pids/$c.pid && -z $(pid_of "$c") ]] && die "$c exited; last log lines:
$(tail -n 20 "$dir/logs/$c.log")"
    done
    ((SECONDS < deadline)) || die "timed out after ${UP_TIMEOUT}s waiting for $what"
    sleep 0.2
  done
}

api() { # api PATH: GET from the apiserver as admin, failing on HTTP errors
  curl -fsS --max-time 5 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT$1"
}
healthz() { [[ $(curl -fsSk --max-time 5 "https://127.0.0.1:$1/healthz") == ok ]]; }

healthy() {
  local c
  for c in "${components[@]}"; do [[ -n $(pid_of "$c") ]] || return 1; done
  api /readyz >/dev/null 2>&1 && healthz "$KCM_PORT" && healthz "$SCHEDULER_PORT"
}

# Every write to a Node object (not its status), with the object the server stored, in
# $dir/audit.log: who set or removed which taint, stamped by the API server itself.
audit_policy() {
  cat >"$dir/audit-policy.yaml" <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: RequestResponse
    resources: [{group: "", resources: ["nodes"]}]
    verbs: [create, update, patch, delete]
  - level: None
YAML
}

on_failed_up() {
  local status=$? c
  trap - EXIT
  ((status == 0)) && return
  log "up failed; stopping what it started (logs kept in $dir/logs)"
  for c in "${components[@]}"; do stop "$c" || true; done
  exit "$status"
}

up() {
  if [[ -d $dir && ! -f $dir/$marker && -n $(ls -A "$dir") ]]; then
    die "$dir exists and was not made by cluster.sh; refusing to use it"
  fi
  if [[ -f $dir/$marker ]] && healthy; then
    log "already up"
    echo "$dir/admin.kubeconfig"
    return 0
  fi
  local start_time=$SECONDS
  check_ports
  # A start that fails half-way stops what it started (logs stay in $dir for the post-mortem).
  trap 'on_failed_up' EXIT
  mkdir -p "$dir/logs" "$dir/pids" "$dir/etcd"
  touch "$dir/$marker"
  local c
  for c in "${components[@]}"; do [[ -n $(pid_of "$c") ]] || rm -f "$dir/pids/$c.pid"; done
  chmod 700 "$dir/etcd"
  pki
  local pki=$dir/pki
  audit_policy

  # --unsafe-no-fsync: a throw-away test store; fsync per write is the main cost of node heartbeats.
  start etcd \
    --name=harness --data-dir="$dir/etcd" --log-level=warn --unsafe-no-fsync \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="harness=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for etcd curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
    --endpoint-reconciler-type=none \
    --allow-privileged=true \
    --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log" --audit-log-format=json
  wait_for "kube-apiserver /readyz" api /readyz

  start kube-controller-manager \
    --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
    --controllers='*' --use-service-account-credentials \
    --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --flex-volume-plugin-dir="$dir/flexvolume" \
    --node-monitor-period=1s --node-monitor-grace-period="$NODE_MONITOR_GRACE_PERIOD"
  start kube-scheduler \
    --kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false
  wait_for "kube-controller-manager /healthz" healthz "$KCM_PORT"
  wait_for "kube-scheduler /healthz" healthz "$SCHEDULER_PORT"
  # Pods can only be admitted once KCM's serviceaccount controller made the default ServiceAccount.
  wait_for "default ServiceAccount" api /api/v1/namespaces/default/serviceaccounts/default
  trap - EXIT
  log "up in $((SECONDS - start_time))s: apiserver https://127.0.0.1:$APISERVER_PORT, logs in $dir/logs"
  echo "$dir/admin.kubeconfig"
}

# stop NAME: TERM, then KILL after $DOWN_TIMEOUT seconds; fails if the process survives.
stop() {
  local name=$1 pid deadline
  pid=$(pid_of "$name")
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + ${DOWN_TIMEOUT:-5}))
  while [[ -n $(pid_of "$name") ]] && ((SECONDS < deadline)); do sleep 0.1; done
  if [[ -n $(pid_of "$name") ]]; then
    log "$name (pid $pid) did not exit on TERM; sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in {1..50}; do [[ -z $(pid_of "$name") ]] && break; sleep 0.1; done
  fi
  [[ -z $(pid_of "$name") ]] || die "$name (pid $pid) still running; leaving $dir in place"
  log "stopped $name (pid $pid)"
}

down() {
  [[ -d $dir ]] || { log "nothing to do: $dir does not exist"; return 0; }
  [[ -f $dir/$marker ]] || die "$dir was not made by cluster.sh; refusing to remove it"
  local c
  # Clients first, etcd last, so nothing hangs on a vanished backend.
  for c in "${components[@]}"; do stop "$c"; done
  rm -rf "$dir"
  log "down: removed $dir"
}

case $cmd in
  up) up ;;
  down) down ;;
  env) echo "export KUBECONFIG=$dir/admin.kubeconfig" ;;
  *) echo "usage: $0 up|down|env [DIR]" >&2; exit 2 ;;
esac
