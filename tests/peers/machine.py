#!/usr/bin/env python3
"""One emulated machine: a sushy-tools Redfish BMC (fake driver) with deterministic power timing.

Run with the peers venv's python (see install.sh), e.g.
  .cache/peers/venv/bin/python tests/peers/machine.py --dir D --port 8443 \
      --system node-1=7f3b0c1e-0000-4000-8000-000000000001 --cert leaf.crt --key leaf.key
Prints "ready PORT" on stdout once https://127.0.0.1:PORT/redfish/v1/ answers; everything else goes to stderr.

What this adds to sushy-tools' own main (which it runs in-process):
  - a reset takes effect exactly --delay seconds later (upstream: a random 1-11 s, truncated to whole
    seconds, and applied only when a client happens to read the system); a background thread applies
    it when due, so the power really changes even if nobody reads it;
  - power.log: one JSON line per power change and per HTTP request;
  - a state file with the current power state, for a simulated kubelet to read;
  - faults on request: --disable-power-off, --redirect-systems-to (a BMC sending clients elsewhere),
    --ignore-resets-report-off (a BMC that lies: it accepts every reset, does nothing, and reads Off
    after a ForceOff), --response-delay (a slow BMC);
  - scripted answers: --systems-page-size (a paginated Systems collection, optionally with a
    nextLink cycle), --duplicate-power-state (a system body that carries PowerState twice),
    --unreadable-system (a listed member that answers 404).
"""
import argparse
import datetime
import hashlib
import io
import json
import os
import re
import shutil
import signal
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request

SYSTEM_PATH = re.compile(r'^/redfish/v1/Systems/([^/]+)')
PROBE_HEADER = 'X-Machine-Ready-Probe'  # our own readiness probe; not written to power.log


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--dir', required=True, help='working dir: config, htpasswd, state/ (wiped at start), logs')
    p.add_argument('--port', type=int, required=True, help='HTTPS port on 127.0.0.1')
    p.add_argument('--system', action='append', required=True, metavar='NAME=UUID',
                   help='an emulated ComputerSystem (repeatable)')
    p.add_argument('--power', choices=['On', 'Off'], default='On', help='initial power state of every system')
    p.add_argument('--delay', type=float, default=0.0,
                   help='seconds from a reset request until the power changes (0: the next read sees it)')
    p.add_argument('--cert', required=True, help='TLS certificate (PEM, may include the chain)')
    p.add_argument('--key', required=True, help='TLS private key (PEM)')
    p.add_argument('--user', action='append', metavar='NAME:PASSWORD',
                   help='Basic-auth user (repeatable; default admin:password)')
    p.add_argument('--disable-power-off', action='store_true',
                   help='fault: ForceOff/GracefulShutdown answer HTTP 400')
    p.add_argument('--redirect-systems-to', metavar='ORIGIN',
                   help='answer every /redfish/v1/Systems request with a 307 to the same path on ORIGIN '
                        '(a BMC sending its client elsewhere)')
    p.add_argument('--systems-page-size', type=int, metavar='N',
                   help='serve the Systems collection in pages of N members, linked by Members@odata.nextLink')
    p.add_argument('--systems-next-link-cycle', action='store_true',
                   help='with --systems-page-size: the last page links back to the first (a nextLink cycle)')
    p.add_argument('--duplicate-power-state', metavar='VALUE',
                   help='every ComputerSystem body carries PowerState twice, the second time as VALUE '
                        '(a lenient JSON reader sees VALUE, a strict one refuses the body)')
    p.add_argument('--status-state-when-off', metavar='VALUE',
                   help="while a system reads Off, its body's Status.State is VALUE (e.g. Absent: a BMC that does "
                        "not know the host; Disabled: what OpenBMC reports for a host that is off)")
    p.add_argument('--unreadable-system', action='append', default=[], metavar='NAME',
                   help='the system NAME (by name or UUID) stays listed but answers 404 (repeatable)')
    p.add_argument('--ignore-resets-report-off', action='store_true',
                   help='fault: every reset is answered as accepted and ignored (the real power, in the state '
                        'file, stays as it was); after a ForceOff or GracefulShutdown the system reads Off until '
                        'an On or a restart is requested (a lying BMC: a fence through it proves nothing)')
    p.add_argument('--response-delay', type=float, default=0.0, metavar='SECONDS',
                   help='answer every request SECONDS late (a slow BMC; the readiness probe excepted)')
    p.add_argument('--power-log', help='JSON-lines log (default DIR/power.log; appended to)')
    p.add_argument('--state-file', help='current power state (default DIR/power-state)')
    args = p.parse_args()
    args.dir = os.path.abspath(args.dir)
    args.power_log = os.path.abspath(args.power_log or os.path.join(args.dir, 'power.log'))
    args.state_file = os.path.abspath(args.state_file or os.path.join(args.dir, 'power-state'))
    args.systems = []
    for spec in args.system:
        name, sep, uuid = spec.partition('=')
        if not (sep and name and uuid):
            p.error(f'--system wants NAME=UUID, got {spec!r}')
        args.systems.append((name, uuid))  # kept as given: some BMCs report upper case
    args.users = args.user or ['admin:password']
    if any(':' not in u for u in args.users):
        p.error('--user wants NAME:PASSWORD')
    if args.delay < 0:
        p.error('--delay must be >= 0')
    if args.response_delay < 0:
        p.error('--response-delay must be >= 0')
    if args.systems_page_size is not None and args.systems_page_size < 1:
        p.error('--systems-page-size must be >= 1')
    if args.systems_next_link_cycle and not args.systems_page_size:
        p.error('--systems-next-link-cycle needs --systems-page-size')
    names = {key for name, uuid in args.systems for key in (name, uuid)}
    if any(u not in names for u in args.unreadable_system):
        p.error('--unreadable-system names a system that --system does not')
    return args


class PowerLog:
    """Append-only JSON lines, flushed at once so a test can read them while we run."""

    def __init__(self, path):
        self._lock = threading.Lock()
        self._file = open(path, 'a', buffering=1, encoding='utf-8')

    def write(self, event, **fields):
        now = time.time()
        stamp = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        entry = {'t': f'{stamp:%Y-%m-%dT%H:%M:%S}.{int(now * 1000) % 1000:03d}Z', 'event': event, **fields}
        with self._lock:
            self._file.write(json.dumps(entry) + '\n')
            self._file.flush()


def write_config(args, auth_file):
    systems = [{
        'uuid': uuid,
        'name': name,
        'power_state': args.power,
        'external_notifier': False,
        # a stable locally administered MAC per system, for the EthernetInterfaces resource
        'nics': [{'mac': '52:54:00:' + ':'.join(re.findall('..', hashlib.sha256(uuid.encode()).hexdigest()[:6]))}],
    } for name, uuid in args.systems]
    config = {
        'SUSHY_EMULATOR_LISTEN_IP': '127.0.0.1',
        'SUSHY_EMULATOR_LISTEN_PORT': args.port,
        'SUSHY_EMULATOR_SSL_CERT': os.path.abspath(args.cert),
        'SUSHY_EMULATOR_SSL_KEY': os.path.abspath(args.key),
        'SUSHY_EMULATOR_FAKE_DRIVER': True,
        'SUSHY_EMULATOR_FAKE_SYSTEMS': systems,
        'SUSHY_EMULATOR_STATE_DIR': os.path.join(args.dir, 'state'),
        'SUSHY_EMULATOR_AUTH_FILE': auth_file,
        'SUSHY_EMULATOR_DISABLE_POWER_OFF': args.disable_power_off,
        'SUSHY_EMULATOR_FEATURE_SET': 'full',
    }
    path = os.path.join(args.dir, 'sushy.conf.py')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('# generated by tests/peers/machine.py; rewritten at every start\n')
        for key, value in config.items():
            f.write(f'{key} = {value!r}\n')
    return path


def write_htpasswd(args, bcrypt):
    path = os.path.join(args.dir, 'htpasswd')
    # sushy accepts bcrypt entries only; cost 4 (the minimum) because every request is checked
    # and the default cost 12 would add ~0.2 s to each one.
    lines = []
    for user in args.users:
        name, _, password = user.partition(':')
        lines.append(f'{name}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.writelines(lines)
    return path


def make_driver(base, error, args, plog):
    """The upstream fake driver with a fixed delay, a lock, and a record of every power change."""
    order = [uuid for _, uuid in args.systems]

    def write_state(states):
        lines = [states[order[0]]] if len(order) == 1 else [f'{u} {states[u]}' for u in order]
        tmp = f'{args.state_file}.tmp.{os.getpid()}'
        with open(tmp, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines) + '\n')
        os.replace(tmp, args.state_file)  # readers never see a half-written file

    class MachineDriver(base):
        # Request threads and the applier thread all go through this lock, so a pending change is
        # applied exactly once and a reset never races with its own application.
        lock = threading.RLock()

        def __init__(self):
            super().__init__()
            self._power = {u: self._systems[u]['power_state'] for u in order}
            self._lie = {}  # --ignore-resets-report-off: uuid -> the power state reported instead of the real one
            write_state(self._power)

        def get_power_state(self, identity):
            with self.lock:
                system = self._get(identity)
                return self._lie.get(system['uuid'], system['power_state'])

        def _get(self, identity):
            with self.lock:
                return super()._get(identity)  # also applies a pending change that is due

        def _update(self, system, **changes):
            with self.lock:
                if isinstance(system, str):
                    system = self._get(system)
                super()._update(system, **changes)
                uuid, now = system['uuid'], system['power_state']
                if self._power.get(uuid) != now:
                    plog.write('power', system=uuid, **{'from': self._power.get(uuid), 'to': now})
                    self._power[uuid] = now
                    write_state(self._power)

        def set_power_state(self, identity, state):
            # Same state mapping as upstream FakeDriver.set_power_state, but the change is due exactly
            # args.delay seconds from now (upstream: int(time.time()) + random.randint(1, 11)).
            with self.lock:
                if args.ignore_resets_report_off:
                    system = self._get(identity)
                    if state in ('ForceOff', 'GracefulShutdown'):
                        self._lie[system['uuid']] = 'Off'
                    else:
                        self._lie.pop(system['uuid'], None)
                    plog.write('reset-ignored', system=system['uuid'], reset_type=state, real=system['power_state'],
                               reports=self._lie.get(system['uuid'], system['power_state']))
                    return
                due = time.time() + args.delay
                system = self._get(identity)
                pending = system.get('pending_power')
                if 'Restart' in state:  # upstream: Off at once, On when due
                    system['power_state'] = 'Off'
                    self._update(system, pending_power={'power_state': state, 'apply_time': due})
                    return
                if 'On' in state:
                    target = 'On'
                elif state in ('ForceOff', 'GracefulShutdown'):
                    target = 'Off'
                else:
                    raise error.NotSupportedError(f'Power state {state} is not supported')
                if system['power_state'] == target:
                    if pending:  # the latest request wins (upstream would let the old one land)
                        self._update(system, pending_power=None)
                elif not (pending and pending['power_state'] == target):
                    self._update(system, pending_power={'power_state': target, 'apply_time': due})
                # else: the same change is already under way; a repeated request keeps its deadline
                # (upstream restarts the timer, so a client re-sending ForceOff would never see Off)

        def apply_due(self):
            """Applies every change that is due; returns the seconds until the next one (or None)."""
            with self.lock:
                dues = [self._get(u).get('pending_power') for u in order]
            dues = [p['apply_time'] for p in dues if p]
            return min(dues) - time.time() if dues else None

    return MachineDriver


class RedirectSystems:
    """A BMC that sends every Systems request to the same path on another origin (307)."""

    def __init__(self, app, origin):
        self.app, self.origin = app, origin.rstrip('/')

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        if not SYSTEM_PATH.match(path) and path.rstrip('/') != '/redfish/v1/Systems':
            return self.app(environ, start_response)
        start_response('307 Temporary Redirect', [('Location', self.origin + path), ('Content-Length', '0')])
        return [b'']


def json_response(start_response, status, document):
    body = json.dumps(document).encode()
    start_response(status, [('Content-Type', 'application/json'), ('Content-Length', str(len(body)))])
    return [body]


class PagedSystems:
    """Serves the Systems collection in pages (?$skip=K), each with the total Members@odata.count and a
    Members@odata.nextLink to the next page; with cycle=True the last page links back to the first."""

    def __init__(self, app, systems, page_size, cycle):
        self.app, self.page_size, self.cycle = app, page_size, cycle
        self.members = [f'/redfish/v1/Systems/{uuid}' for _, uuid in systems]

    def __call__(self, environ, start_response):
        if environ.get('PATH_INFO', '').rstrip('/') != '/redfish/v1/Systems' or environ.get('REQUEST_METHOD') != 'GET':
            return self.app(environ, start_response)
        query = urllib.parse.parse_qs(environ.get('QUERY_STRING', ''))
        skip = int(query.get('$skip', ['0'])[0])
        page = self.members[skip:skip + self.page_size]
        document = {
            '@odata.type': '#ComputerSystemCollection.ComputerSystemCollection',
            '@odata.id': '/redfish/v1/Systems',
            'Name': 'Computer System Collection',
            'Members@odata.count': len(self.members),
            'Members': [{'@odata.id': m} for m in page],
        }
        if skip + self.page_size < len(self.members):
            document['Members@odata.nextLink'] = f'/redfish/v1/Systems?$skip={skip + self.page_size}'
        elif self.cycle:
            document['Members@odata.nextLink'] = '/redfish/v1/Systems'
        return json_response(start_response, '200 OK', document)


class ScriptedSystems:
    """Per-system faults: listed members that answer 404, bodies that carry PowerState twice, and the
    Status.State a system body carries while it reads Off."""

    def __init__(self, app, aliases, unreadable, duplicate_power_state, status_state_when_off):
        self.app, self.duplicate, self.state_when_off = app, duplicate_power_state, status_state_when_off
        self.unreadable = {aliases[u] for u in unreadable}
        self.aliases = aliases

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        match = SYSTEM_PATH.match(path)
        if not match or environ.get('REQUEST_METHOD') != 'GET':
            return self.app(environ, start_response)
        if self.aliases.get(match.group(1)) in self.unreadable:
            return json_response(start_response, '404 Not Found', {'error': {'message': 'scripted: unreadable'}})
        if (self.duplicate is None and self.state_when_off is None) or path.rstrip('/') != match.group(0):
            return self.app(environ, start_response)
        captured = {}

        def capture(status, headers, exc_info=None):
            captured['status'], captured['headers'] = status, headers
            return lambda data: None

        result = self.app(environ, capture)
        try:
            body = b''.join(result).decode()
        finally:
            getattr(result, 'close', lambda: None)()
        if captured['status'].startswith('200') and self.state_when_off is not None:
            if json.loads(body).get('PowerState') == 'Off':
                status = json.loads(body).get('Status') or {}
                status['State'] = self.state_when_off
                body = re.sub(r'"Status":\s*\{[^{}]*\}', lambda m: '"Status": ' + json.dumps(status), body, count=1)
                if '"Status"' not in body:
                    body = body.rstrip().rstrip('}') + ', "Status": ' + json.dumps(status) + '}'
        if captured['status'].startswith('200') and self.duplicate is not None:
            # Text, not json.dumps: a dict cannot hold a key twice.
            body, count = re.subn(r'("PowerState":\s*"[^"]*")',
                                  lambda m: f'{m.group(1)}, "PowerState": {json.dumps(self.duplicate)}', body, count=1)
            assert count == 1, 'no PowerState in the system body'
        data = body.encode()
        headers = [(k, v) for k, v in captured['headers'] if k.lower() != 'content-length']
        start_response(captured['status'], headers + [('Content-Length', str(len(data)))])
        return [data]


class SlowResponses:
    """A slow BMC: every request is answered `delay` seconds late (the readiness probe excepted)."""

    def __init__(self, app, delay):
        self.app, self.delay = app, delay

    def __call__(self, environ, start_response):
        if not environ.get('HTTP_' + PROBE_HEADER.upper().replace('-', '_')):
            time.sleep(self.delay)
        return self.app(environ, start_response)


class RequestLog:
    """Outermost WSGI layer, so it also sees the auth middleware's 401s. Logs no headers or bodies."""

    def __init__(self, app, plog, aliases):
        self.app, self.plog, self.aliases = app, plog, aliases

    def __call__(self, environ, start_response):
        if environ.get('HTTP_' + PROBE_HEADER.upper().replace('-', '_')):
            return self.app(environ, start_response)
        started = time.monotonic()
        path = environ.get('PATH_INFO', '')
        entry = {'method': environ.get('REQUEST_METHOD'), 'path': path}
        match = SYSTEM_PATH.match(path)
        if match and match.group(1) in self.aliases:
            entry['system'] = self.aliases[match.group(1)]
        if entry['method'] == 'POST' and path.rstrip('/').endswith('ComputerSystem.Reset'):
            # Read the body for ResetType and hand the app an identical copy.
            length = int(environ.get('CONTENT_LENGTH') or 0)
            body = environ['wsgi.input'].read(length) if length else b''
            environ['wsgi.input'] = io.BytesIO(body)
            try:
                entry['reset_type'] = json.loads(body).get('ResetType')
            except (ValueError, AttributeError):
                entry['reset_type'] = None

        def recording_start_response(status, headers, exc_info=None):
            entry['status'] = int(status.split()[0])
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, recording_start_response)
        except Exception:
            entry['status'] = 500  # werkzeug answers 500 (e.g. sushy's auth layer crashes on "Bearer")
            raise
        finally:
            entry['ms'] = round((time.monotonic() - started) * 1000, 1)
            self.plog.write('request', **entry)


def applier(driver):
    """Makes pending power changes happen on time even when no client reads the system."""
    while True:
        try:
            wait = driver.apply_due()
        except Exception as exc:  # keep the machine alive; the next round retries
            print(f'machine: applying power changes failed: {exc!r}', file=sys.stderr)
            wait = None
        time.sleep(0.1 if wait is None else min(max(wait, 0.001), 0.1))


def announce_ready(port, out):
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # only asks "does it answer?"
    req = urllib.request.Request(f'https://127.0.0.1:{port}/redfish/v1/', headers={PROBE_HEADER: '1'})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                if resp.status == 200:
                    print(f'ready {port}', file=out, flush=True)
                    return
        except OSError:
            pass
        time.sleep(0.05)
    print(f'machine: https://127.0.0.1:{port}/redfish/v1/ did not answer within 60 s', file=sys.stderr)


def main():
    args = parse_args()
    os.makedirs(args.dir, exist_ok=True)
    shutil.rmtree(os.path.join(args.dir, 'state'), ignore_errors=True)  # sushy's sqlite persists power state
    os.environ.pop('SUSHY_EMULATOR_CONFIG', None)  # importing sushy's main would load it

    import bcrypt
    from sushy_tools import error
    from sushy_tools.emulator import main as sushy
    from sushy_tools.emulator.resources.systems import fakedriver

    plog = PowerLog(args.power_log)
    config = write_config(args, write_htpasswd(args, bcrypt))
    fakedriver.FakeDriver = make_driver(fakedriver.FakeDriver, error, args, plog)  # main looks it up here

    ready_out, sys.stdout = sys.stdout, sys.stderr  # stdout carries only "ready PORT" (Flask prints a banner)
    upstream_run = sushy.app.run

    def run(*a, **kw):  # called by sushy's main once the config is loaded
        app = sushy.app
        driver = app.systems  # creates the driver: fresh state, state file written
        aliases = {key: uuid for name, uuid in args.systems for key in (name, uuid)}
        if args.unreadable_system or args.duplicate_power_state is not None or args.status_state_when_off is not None:
            app.wsgi_app = ScriptedSystems(app.wsgi_app, aliases, args.unreadable_system, args.duplicate_power_state,
                                           args.status_state_when_off)
        if args.systems_page_size:
            app.wsgi_app = PagedSystems(app.wsgi_app, args.systems, args.systems_page_size,
                                        args.systems_next_link_cycle)
        if args.redirect_systems_to:
            app.wsgi_app = RedirectSystems(app.wsgi_app, args.redirect_systems_to)
        if args.response_delay:
            app.wsgi_app = SlowResponses(app.wsgi_app, args.response_delay)
        app.wsgi_app = RequestLog(app.wsgi_app, plog, aliases)
        threading.Thread(target=applier, args=(driver,), daemon=True, name='applier').start()
        threading.Thread(target=announce_ready, args=(args.port, ready_out), daemon=True, name='ready').start()
        plog.write('start', pid=os.getpid(), port=args.port, delay=args.delay, response_delay=args.response_delay,
                   ignore_resets_report_off=args.ignore_resets_report_off,
                   systems={uuid: args.power for _, uuid in args.systems})
        return upstream_run(*a, **kw)

    sushy.app.run = run
    # SIGTERM: leave through the normal path (werkzeug closes its socket). SIGSTOP/SIGCONT need nothing:
    # a frozen machine answers nothing, and when thawed the applier catches up with overdue changes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    import logging
    logging.getLogger('werkzeug').setLevel(logging.WARNING)  # power.log already has every request
    sys.argv = ['sushy-emulator', '--config', config]
    return sushy.main()


if __name__ == '__main__':
    sys.exit(main())
