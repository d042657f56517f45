#!/usr/bin/env bash
# Installs the BMC and PDU test peers into the git-ignored .cache/peers:
#   - a venv with sushy-tools (Redfish), pyghmi (IPMI) and snmpsim (SNMP PDUs), pinned, see requirements.txt,
#   - Debian openipmi (ipmi_sim, an IPMI BMC), ipmitool, fence-agents (fence_redfish, fence_ipmilan,
#     fence_apc_snmp) and snmp (snmpget/snmpset) as independent reference clients.
# Idempotent: a quick no-op when everything is current.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=$root/.cache/peers/venv
req=$here/requirements.txt
# Debian's own python, not a pyenv shim: the venv must not depend on the caller's shell setup.
py=${PEERS_PYTHON:-/usr/bin/python3}

log() { printf '[peers] %s\n' "$*"; }

# The stamp records what the venv was built from; a changed pin list or python rebuilds it.
want=$( { "$py" -c 'import sys; print(sys.version)'; cat "$req"; } | sha256sum | cut -d' ' -f1)
if [[ -x $venv/bin/sushy-emulator && -x $venv/bin/fakebmc && -x $venv/bin/snmpsim-command-responder && "$(cat "$venv/.stamp" 2>/dev/null)" == "$want" ]]; then
  log "venv current: $venv"
else
  start=$SECONDS
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$req"
  echo "$want" >"$venv/.stamp"
  log "venv created in $((SECONDS - start))s: $venv ($("$venv/bin/pip" show sushy-tools pyghmi | sed -n 's/^Version: //p' | paste -sd' '))"
fi

# Each Debian package by the file the tests run from it; only the missing ones are installed.
declare -A wanted=([fence-agents]=/usr/sbin/fence_ipmilan [ipmitool]=/usr/bin/ipmitool [openipmi]=/usr/bin/ipmi_sim)
missing=()
for package in fence-agents ipmitool openipmi; do
  [[ -x ${wanted[$package]} ]] || missing+=("$package")
done
if ((${#missing[@]} == 0)); then
  log "Debian peers present: ${wanted[*]}"
else
  start=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  aptlog=$root/.cache/peers/apt.log
  mkdir -p "${aptlog%/*}"
  # Without recommends: ipmitool would bring openipmi's recommends, fence-agents a mail server.
  apt_install() { apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1; }
  # Try the package lists already on the machine first; refresh them only when that fails.
  if ! apt_install; then
    log "apt-get install failed; running apt-get update and retrying"
    apt-get update -q >>"$aptlog" 2>&1 && apt_install || { cat "$aptlog" >&2; exit 1; }
  fi
  log "installed ${missing[*]} in $((SECONDS - start))s: $(dpkg-query -W -f='${Package} ${Version}  ' "${missing[@]}")"
fi

# --- SNMP PDU peers ------------------------------------------------------------------------------------
# Debian's snmp (snmpget, snmpset) cross-checks the SNMP PDU client; fence_apc_snmp comes with
# fence-agents above, which only recommends snmp, so it is installed explicitly.
if [[ -x /usr/bin/snmpget && -x /usr/bin/snmpset ]]; then
  log "snmp present: /usr/bin/snmpget"
else
  start=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  aptlog=$root/.cache/peers/apt.log
  mkdir -p "${aptlog%/*}"
  snmp_install() { apt-get install -y -q --no-install-recommends snmp >>"$aptlog" 2>&1; }
  if ! snmp_install; then
    log "apt-get install snmp failed; running apt-get update and retrying"
    apt-get update -q >>"$aptlog" 2>&1 && snmp_install || { cat "$aptlog" >&2; exit 1; }
  fi
  log "snmp installed in $((SECONDS - start))s: $(dpkg-query -W -f='${Version}' snmp)"
fi
