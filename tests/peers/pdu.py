#!/usr/bin/env python3
"""One emulated Redfish PDU: a DMTF PowerDistribution rack PDU with outlets, over HTTPS with Basic auth.

Standard library only (http.server + ssl); run with any python3, e.g.
  python3 tests/peers/pdu.py --dir D --port 8443 --cert leaf.crt --key leaf.key --outlets A1,A2 --load 180
Prints "ready PORT" on stdout once it listens; everything else goes to stderr.

Resources (DSP2056 / Outlet schema):
  GET  /redfish/v1                                                  service root (no auth, like a BMC's)
  GET  /redfish/v1/PowerEquipment/RackPDUs/{pdu}/Outlets/{id}       PowerState, PowerStateInTransition,
                                                                    PowerWatts (with --load), Actions
  POST /redfish/v1/PowerEquipment/RackPDUs/{pdu}/Outlets/{id}/Actions/Outlet.PowerControl
       {"PowerState": "On"|"Off"}: 204; the state changes --transition seconds later (meanwhile
       PowerStateInTransition is true); "PowerCycle" or anything else: 400 with a Redfish error body.
Everything else needs Basic auth (401 without); unknown paths 404.

State file DIR/outlets.json, read on every request and written on every change (tmp + rename), so a
test sees and forces each outlet: {"A1": {"state": "On", "target": null, "due": 0, "load": 180.0,
"welded": false}}. "load" is the draw in W while the outlet feeds the machine (null: unmetered, no
PowerWatts); "welded" makes an outlet that reads Off keep drawing its load (a welded relay).
DIR/requests.log gets one JSON line per answered request (method, path, status, power_state).
"""
import argparse
import base64
import hmac
import json
import os
import re
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OUTLET = re.compile(r'^/redfish/v1/PowerEquipment/RackPDUs/([^/]+)/Outlets/([^/]+)(/Actions/Outlet\.PowerControl)?/?$')
LOCK = threading.Lock()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--dir', required=True)
    p.add_argument('--port', type=int, required=True, help='HTTPS port on 127.0.0.1')
    p.add_argument('--cert', required=True)
    p.add_argument('--key', required=True)
    p.add_argument('--user', default='admin:password', metavar='NAME:PASSWORD')
    p.add_argument('--pdu', default='1', help='the rack PDU Id')
    p.add_argument('--outlets', default='A1,A2', help='outlet Ids, comma-separated')
    p.add_argument('--power', choices=['On', 'Off'], default='On')
    p.add_argument('--load', type=float, help='metered draw in W while On (default: unmetered)')
    p.add_argument('--transition', type=float, default=0.0, help='seconds a PowerControl stays in transition')
    return p.parse_args()


class State:
    def __init__(self, path):
        self.path = path

    def load(self):
        with open(self.path, encoding='utf-8') as f:
            outlets = json.load(f)
        now, changed = time.time(), False
        for outlet in outlets.values():
            if outlet.get('target') and outlet.get('due', 0) <= now:
                outlet['state'], outlet['target'], outlet['due'] = outlet['target'], None, 0
                changed = True
        if changed:
            self.store(outlets)
        return outlets

    def store(self, outlets):
        with open(self.path + '.tmp', 'w', encoding='utf-8') as f:
            json.dump(outlets, f)
        os.replace(self.path + '.tmp', self.path)


def outlet_body(pdu, oid, outlet):
    base = f'/redfish/v1/PowerEquipment/RackPDUs/{pdu}/Outlets/{oid}'
    body = {
        '@odata.id': base,
        '@odata.type': '#Outlet.v1_4_4.Outlet',
        'Id': oid,
        'Name': f'Outlet {oid}',
        'PowerState': outlet['state'],
        'PowerStateInTransition': bool(outlet.get('target')),
        'PowerEnabled': True,
        'Status': {'State': 'Enabled', 'Health': 'OK'},
        'Actions': {'#Outlet.PowerControl': {
            'target': f'{base}/Actions/Outlet.PowerControl',
            'PowerState@Redfish.AllowableValues': ['On', 'Off'],
        }},
    }
    if outlet.get('load') is not None:
        feeding = outlet['state'] == 'On' or outlet.get('welded')
        body['PowerWatts'] = {'DataSourceUri': f'{base}/Sensors/Power', 'Reading': outlet['load'] if feeding else 0.0}
    return body


def error_body(message):
    return {'error': {'code': 'Base.1.0.GeneralError', 'message': message}}


def make_handler(args, state, log):
    user, _, password = args.user.partition(':')
    expected = 'Basic ' + base64.b64encode(f'{user}:{password}'.encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, *_):
            pass

        def answer(self, status, body=None, power_state=None):
            data = json.dumps(body).encode() if body is not None else b''
            self.send_response(status)
            if status == 401:
                self.send_header('WWW-Authenticate', 'Basic realm="PDU"')
            if data:
                self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.send_header('Connection', 'close')
            self.end_headers()
            # Logged before the answer goes out: a client that saw the answer finds it in the log.
            log(method=self.command, path=self.path, status=status, power_state=power_state)
            self.wfile.write(data)

        def authorized(self):
            given = self.headers.get('Authorization', '')
            return hmac.compare_digest(given.encode(), expected.encode())

        def do_GET(self):
            if self.path.rstrip('/') in ('/redfish', '/redfish/v1'):
                return self.answer(200, {'@odata.id': '/redfish/v1', 'Id': 'RootService', 'Name': 'PDU',
                                         'PowerEquipment': {'@odata.id': '/redfish/v1/PowerEquipment'}})
            if not self.authorized():
                return self.answer(401, error_body('unauthorized'))
            match = OUTLET.match(self.path)
            with LOCK:
                outlets = state.load()
            if not match or match.group(3) or match.group(1) != args.pdu or match.group(2) not in outlets:
                return self.answer(404, error_body('not found'))
            self.answer(200, outlet_body(args.pdu, match.group(2), outlets[match.group(2)]))

        def do_POST(self):
            length = int(self.headers.get('Content-Length') or 0)
            raw = self.rfile.read(length) if length else b''
            if not self.authorized():
                return self.answer(401, error_body('unauthorized'))
            match = OUTLET.match(self.path)
            try:
                wanted = json.loads(raw or b'{}').get('PowerState')
            except (ValueError, AttributeError):
                wanted = None
            with LOCK:
                outlets = state.load()
                if not match or not match.group(3) or match.group(1) != args.pdu or match.group(2) not in outlets:
                    return self.answer(404, error_body('not found'), wanted)
                if wanted not in ('On', 'Off'):
                    return self.answer(400, error_body(f'PowerState {wanted!r} is not supported'), wanted)
                outlet = outlets[match.group(2)]
                if args.transition > 0:
                    outlet['target'], outlet['due'] = wanted, time.time() + args.transition
                else:
                    outlet['state'], outlet['target'], outlet['due'] = wanted, None, 0
                state.store(outlets)
            self.answer(204, None, wanted)

    return Handler


def main():
    args = parse_args()
    os.makedirs(args.dir, exist_ok=True)
    state = State(os.path.join(args.dir, 'outlets.json'))
    state.store({oid: {'state': args.power, 'target': None, 'due': 0, 'load': args.load, 'welded': False}
                 for oid in args.outlets.split(',')})
    log_file = open(os.path.join(args.dir, 'requests.log'), 'a', buffering=1, encoding='utf-8')

    def log(**entry):
        with LOCK:
            log_file.write(json.dumps({'t': round(time.time(), 3), **entry}) + '\n')

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(args.cert, args.key)
        server = ThreadingHTTPServer(('127.0.0.1', args.port), make_handler(args, state, log))
    except (OSError, ssl.SSLError) as exc:
        print(f'pdu.py: {exc}', file=sys.stderr)
        return 1
    server.daemon_threads = True
    # The handshake runs in the request thread: a client that never finishes it blocks only itself.
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    print(f'ready {args.port}', flush=True)
    server.serve_forever()
    return 0


if __name__ == '__main__':
    sys.exit(main())
