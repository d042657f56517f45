#!/usr/bin/env python3
"""One emulated SNMP PDU: an APC rPDU (PowerNet-MIB) served by snmpsim, over SNMPv3 and v2c.

Run with the peers venv's python (see install.sh), e.g.
  .cache/peers/venv/bin/python tests/peers/pdu_snmp.py --dir D --port 16100 --outlets 8 \
      --v3-user coroner --v3-auth-key AUTHKEY12 --v3-priv-key PRIVKEY12 --community s3cret
Writes the recording and the outlet state into --dir, then becomes snmpsim-command-responder (exec: the
pid is the agent's, so SIGSTOP freezes it like a hung PDU). snmpsim prints nothing useful when it is
ready: a client polls it (a v2c GET of sysObjectID.0) until it answers.

snmpsim selects a recording by its file name: the v2c community, or the SNMPv3 contextName (a request
with the empty contextName a real PDU serves finds none). So the recording is written twice, as
--community (v2c) and as --context (v3, default `apc-rpdu`, which is then a v2c community too); both
share the outlets through the state file (see snmp/apc_outlets.py).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RPDU = '1.3.6.1.4.1.318.1.3.4.5'  # PowerNet-MIB masterSwitchrPDU (AP78xx/AP79xx)
CONTROL = '1.3.6.1.4.1.318.1.1.12.3.3.1.1'  # rPDUOutletControlEntry
STATUS = '1.3.6.1.4.1.318.1.1.12.3.5.1.1'  # rPDUOutletStatusEntry


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--dir', required=True, help='working dir: recordings, state, logs')
    p.add_argument('--port', type=int, required=True, help='UDP port on 127.0.0.1')
    p.add_argument('--outlets', type=int, default=8, help='outlets 1..N')
    p.add_argument('--power', choices=['On', 'Off'], default='On', help='initial state of every outlet')
    p.add_argument('--transition', type=float, default=0.0,
                   help='seconds an accepted command stays pending before the state changes')
    p.add_argument('--sys-object-id', default=RPDU, help=f'sysObjectID.0 (default {RPDU}, an APC rPDU)')
    p.add_argument('--community', required=True, help='v1/v2c community (read-write)')
    p.add_argument('--context', default='apc-rpdu', help='SNMPv3 contextName of the recording')
    p.add_argument('--v3-user', required=True)
    p.add_argument('--v3-auth-key', required=True)
    p.add_argument('--v3-auth-proto', default='SHA', help='snmpsim name: SHA, SHA256, ...')
    p.add_argument('--v3-priv-key', required=True)
    p.add_argument('--v3-priv-proto', default='AES', help='snmpsim name: AES (128), AES256, ...')
    p.add_argument('--engine-id', default='8000013e04636f726f6e6572',
                   help='SNMPv3 engine ID in hex (fixed, so a restart is the same PDU rebooted)')
    p.add_argument('--keep-state', action='store_true', help='keep DIR/outlets.json from an earlier run')
    return p.parse_args()


def recording(args):
    lines = [
        '1.3.6.1.2.1.1.1.0|4|APC Web/SNMP Management Card (MB:v4.1.0 PF:v6.9.6 PN:apc_hw05_aos_696.bin)',
        f'1.3.6.1.2.1.1.2.0|6|{args.sys_object_id}',
        '1.3.6.1.2.1.1.3.0|67|4242',
        '1.3.6.1.2.1.1.5.0|4|coroner-test-pdu',
    ]
    # snmprec files must list OIDs in order: control columns, then status columns.
    for column, name in ((1, 'index'), (2, 'name'), (4, 'command')):
        for n in range(1, args.outlets + 1):
            lines.append(row(CONTROL, column, n, name))
    for column, name in ((1, 'index'), (2, 'name'), (4, 'state'), (5, 'pending')):
        for n in range(1, args.outlets + 1):
            lines.append(row(STATUS, column, n, name))
    return '\n'.join(lines) + '\n'


def row(entry, column, n, name):
    oid = f'{entry}.{column}.{n}'
    if name == 'index':
        return f'{oid}|2|{n}'
    if name == 'name':
        return f'{oid}|4|Outlet {n}'
    return f'{oid}|2:apc_outlets|outlet={n},column={name}'


def main():
    args = parse_args()
    data = os.path.join(args.dir, 'data')
    os.makedirs(data, exist_ok=True)
    text = recording(args)
    for name in (args.context, args.community):
        with open(os.path.join(data, f'{name}.snmprec'), 'w', encoding='utf-8') as f:
            f.write(text)
    state = os.path.join(args.dir, 'outlets.json')
    if not (args.keep_state and os.path.exists(state)):
        outlets = {str(n): {'state': args.power, 'target': None, 'due': 0} for n in range(1, args.outlets + 1)}
        with open(state + '.tmp', 'w', encoding='utf-8') as f:
            json.dump(outlets, f)
        os.replace(state + '.tmp', state)
    responder = os.path.join(os.path.dirname(sys.executable), 'snmpsim-command-responder')
    log = os.path.join(args.dir, 'commands.log')
    argv = [
        responder,
        f'--cache-dir={os.path.join(args.dir, "cache")}',
        f'--variation-modules-dir={os.path.join(HERE, "snmp")}',
        f'--variation-module-options=apc_outlets:state:{state},log:{log},transition:{args.transition}',
        '--logging-method=null',
        # The engine's options follow its --v3-engine-id (an option before it starts another engine).
        f'--v3-engine-id={args.engine_id}',
        f'--data-dir={data}',
        f'--v3-user={args.v3_user}',
        f'--v3-auth-key={args.v3_auth_key}',
        f'--v3-auth-proto={args.v3_auth_proto}',
        f'--v3-priv-key={args.v3_priv_key}',
        f'--v3-priv-proto={args.v3_priv_proto}',
        f'--agent-udpv4-endpoint=127.0.0.1:{args.port}',
    ]
    # snmpsim refuses to run as root unless told to drop privileges (to a user who could not write
    # DIR) or allowed to keep them; the peer binds loopback only and CI runs as root.
    os.environ['SNMPSIM_ALLOW_ROOT'] = 'true'
    os.execv(responder, argv)


if __name__ == '__main__':
    main()
