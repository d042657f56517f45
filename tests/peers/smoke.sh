#!/usr/bin/env bash
# Smoke test of the Redfish BMC peers: installs them, starts five emulated machines on free loopback
# ports and checks them with curl, openssl and fence_redfish. Stops what it started; exits 1 on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
peers=$root/.cache/peers
py=$peers/venv/bin/python
certs=$peers/certs
work=$peers/smoke # inspect it after a failure; wiped at the next run
uuid=7f3b0c1e-0000-4000-8000-000000000001

bash "$here/install.sh"
bash "$here/certs.sh" "$certs"
rm -rf "$work"
mkdir -p "$work"

passed=0 failed=0
ok() { echo "ok - $*"; passed=$((passed + 1)); }
fail() { echo "FAIL - $*"; failed=$((failed + 1)); }
check() { # DESCRIPTION COMMAND...: pass when COMMAND succeeds
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}

declare -A port pid
cleanup() {
  local p
  for p in "${pid[@]}"; do
    kill -CONT "$p" 2>/dev/null || true # a stopped process would not act on SIGTERM
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start() { # NAME MACHINE-ARGS...: starts a machine and waits for its "ready PORT" line
  local name=$1; shift
  port[$name]=$(free_port)
  "$py" "$here/machine.py" --dir "$work/$name" --port "${port[$name]}" --system "node-1=$uuid" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  pid[$name]=$!
  for _ in $(seq 300); do
    grep -q "^ready ${port[$name]}$" "$work/$name.out" && return 0
    kill -0 "${pid[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "machine $name did not become ready:" >&2
  cat "$work/$name.err" >&2
  exit 1
}

url() { echo "https://127.0.0.1:${port[$1]}/redfish/v1/Systems/$uuid"; }
redfish() { curl -sS --cacert "$certs/ca.crt" -u admin:password "$@"; }
power_state() { redfish "$(url "$1")" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["PowerState"])'; }
force_off() { # NAME: prints the HTTP status
  redfish -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d '{"ResetType":"ForceOff"}' "$(url "$1")/Actions/ComputerSystem.Reset"
}
is() { [[ "$1" == "$2" ]] || { echo "  expected '$2', got '$1'" >&2; return 1; }; }

# reset_to_power_ms LOG: ms from the last ForceOff request to the power change after it,
# and whether any request came in between (it must not: the change must not wait for a reader).
reset_to_power_ms() {
  "$py" - "$1" <<'EOF'
import datetime, json, sys
ts = lambda e: datetime.datetime.strptime(e["t"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
events = [json.loads(line) for line in open(sys.argv[1])]
post = max(i for i, e in enumerate(events) if e.get("reset_type") == "ForceOff")
change = next(i for i in range(post, len(events)) if events[i]["event"] == "power")
between = sum(1 for e in events[post + 1:change] if e["event"] == "request")
print(round((ts(events[change]) - ts(events[post])) * 1000), between)
EOF
}

start fast --delay 0 --cert "$certs/leaf.crt" --key "$certs/leaf.key"
start slow --delay 3 --cert "$certs/leaf.crt" --key "$certs/leaf.key"
start nooff --disable-power-off --cert "$certs/leaf.crt" --key "$certs/leaf.key"
start factory --cert "$certs/self-signed.crt" --key "$certs/self-signed.key"
start named --cert "$certs/named-leaf.crt" --key "$certs/named-leaf.key"
echo "machines: fast=${port[fast]} slow=${port[slow]} nooff=${port[nooff]} factory=${port[factory]} named=${port[named]}"

# delay 0: the first read after the reset sees Off, and the change is logged.
check "fast: PowerState On" is "$(power_state fast)" On
check "fast: ForceOff -> 204" is "$(force_off fast)" 204
check "fast: reads Off at once" is "$(power_state fast)" Off
check "fast: power.log has On -> Off" grep -q '"event": "power", "system": "'$uuid'", "from": "On", "to": "Off"' "$work/fast/power.log"
check "fast: state file says Off" is "$(cat "$work/fast/power-state")" Off
check "no credentials -> 401" is "$(curl -sS --cacert "$certs/ca.crt" -o /dev/null -w '%{http_code}' "$(url fast)")" 401
check "power.log holds no credentials" bash -c "! grep -qi -e password -e authorization '$work/fast/power.log'"

# delay 3: On for 3 s, then Off without anyone reading it.
check "slow: ForceOff -> 204" is "$(force_off slow)" 204
check "slow: still On right after" is "$(power_state slow)" On
sleep 2
check "slow: state file On at +2 s" is "$(cat "$work/slow/power-state")" On
sleep 1.5
check "slow: state file Off at +3.5 s (no GET in between)" is "$(cat "$work/slow/power-state")" Off
read -r delta between < <(reset_to_power_ms "$work/slow/power.log") || true
echo "  slow: reset -> power change ${delta} ms, requests in between: $between"
check "slow: change 3000 ms (+-100) after the reset" test "$delta" -ge 2900 -a "$delta" -le 3100
check "slow: applied without a reader" is "$between" 1 # the one GET right after the POST
check "slow: reads Off" is "$(power_state slow)" Off

# the fault switch
check "nooff: ForceOff -> 400" is "$(force_off nooff)" 400
check "nooff: still On" is "$(power_state nooff)" On

# factory certificate: not CA-signed, trusted by pin.
check "factory: rejected with the test CA" bash -c "! curl -sS --cacert '$certs/ca.crt' -u admin:password -o /dev/null '$(url factory)' 2>/dev/null"
check "factory: works with --insecure" is "$(curl -sS --insecure -u admin:password -o /dev/null -w '%{http_code}' "$(url factory)")" 200
served_pin=$(openssl s_client -connect "127.0.0.1:${port[factory]}" </dev/null 2>/dev/null | openssl x509 -outform der | sha256sum | cut -d' ' -f1)
check "factory: served cert matches self-signed.sha256" is "$served_pin" "$(cat "$certs/self-signed.sha256")"

# a CA-signed certificate naming bmc.coroner.test only: fine under that name, refused for the IP.
named_url="https://bmc.coroner.test:${port[named]}/redfish/v1/"
check "named: valid as bmc.coroner.test" is "$(redfish --resolve "bmc.coroner.test:${port[named]}:127.0.0.1" -o /dev/null -w '%{http_code}' "$named_url")" 200
check "named: refused as 127.0.0.1" bash -c "! curl -sS --cacert '$certs/ca.crt' -o /dev/null 'https://127.0.0.1:${port[named]}/redfish/v1/' 2>/dev/null"

# fence_redfish as an independent client. Options go on stdin (key=value lines; the agent reads
# stdin only when it gets no arguments), so the password never shows in argv.
fence() { # NAME ACTION [CA]: prints fence_redfish's return code
  local rc=0
  printf '%s\n' "action=$2" ip=127.0.0.1 "ipport=${port[$1]}" username=admin password=password ssl=1 \
    "systems-uri=/redfish/v1/Systems/$uuid" |
    REQUESTS_CA_BUNDLE=${3:-$certs/ca.crt} PYTHONWARNINGS=ignore::DeprecationWarning \
      /usr/sbin/fence_redfish >>"$work/fence.log" 2>&1 || rc=$?
  echo "$rc"
}
check "fence_redfish status of an Off machine -> 2" is "$(fence fast status)" 2
check "fence_redfish on -> 0" is "$(fence fast on)" 0
check "fence_redfish status -> 0 (on)" is "$(fence fast status)" 0
check "fence_redfish off -> 0" is "$(fence fast off)" 0
check "fence_redfish status -> 2 (off)" is "$(fence fast status)" 2
check "fence_redfish with the wrong CA -> 1" is "$(fence fast status "$certs/other-ca.crt")" 1
check "  ... because verification failed" grep -q CERTIFICATE_VERIFY_FAILED "$work/fence.log"
check "fence.log holds no password" bash -c "! grep -q 'password=' '$work/fence.log'"

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
