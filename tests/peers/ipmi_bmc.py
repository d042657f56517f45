"""One emulated IPMI v2.0 BMC = one pyghmi.ipmi.bmc.Bmc on 127.0.0.1 (run with .cache/peers/venv/bin/python).

pyghmi 1.6.19 answers RMCP+ with cipher suite 3 only. Its RAKP 2 carries the GUID's bytes as given
(--guid, 32 hex digits); its stock Get System GUID is 0xC1 (invalid command), so this BMC answers
it itself: the same bytes (--system-guid same, the default), other bytes (HEX), or 0xC1
(--system-guid unavailable). Power lives in --state-file (On/Off); only power down and power up
change it, every other Chassis Control directive is logged as refused and answered 0xCC.

Fault switches for coroner's tests: --kg (a BMC key of its own), --session-limit/--idle-timeout (a
BMC with few session slots: an Open Session past the limit is answered "insufficient resources"
until a session closes or has been idle that long), --downgrade (Open Session is accepted with
cipher suite 0's algorithms: no authentication, integrity or confidentiality), --tamper (every
signed reply inside a session is preceded by a copy with a broken AuthCode and a copy for another
session ID, and followed by a replay of itself).

stdout gets exactly `ready PORT` once the socket is bound; --log gets one JSON object per line:
{"event": "request", "netfn": 0, "command": 2, "data": [0]}, {"event": "power", "to": "Off"},
{"event": "open"}, {"event": "refused-open"}, {"event": "close"}, {"event": "tampered"}.
"""

import argparse
import json
import os
import sys
import time
import uuid

import pyghmi.ipmi.bmc as bmc
import pyghmi.ipmi.private.serversession as serversession
import pyghmi.ipmi.private.session as ipmisession

NETFN_APP = 6
GET_SYSTEM_GUID = 0x37
OPEN_SESSION_REQUEST = 0x10
OPEN_SESSION_RESPONSE = 0x11
INSUFFICIENT_RESOURCES = 0x01


class Log:
    def __init__(self, path):
        self.path = path

    def __call__(self, event, **fields):
        if self.path:
            with open(self.path, "a") as log:
                log.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")


def write_state(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(state + "\n")
    os.replace(tmp, path)


class TestBmc(bmc.Bmc):
    def __init__(self, args, log):
        name, password = args.user.split(":", 1)
        super().__init__({name: password}, port=args.port, bmcuuid=uuid.UUID(bytes=bytes.fromhex(args.guid)),
                         address="127.0.0.1")
        self.state_file = args.state_file
        self.system_guid = args.system_guid
        self.session_limit = args.session_limit
        self.idle_timeout = args.idle_timeout
        self.log = log
        self.sessions = []
        if args.kg:
            self.set_kg(args.kg)
        write_state(self.state_file, args.power)

    def get_power_state(self):
        with open(self.state_file) as f:
            return "on" if f.read().strip() == "On" else "off"

    def _set(self, state):
        write_state(self.state_file, state)
        self.log("power", to=state)

    def power_off(self):
        self._set("Off")

    def power_on(self):
        self._set("On")

    def _refuse(self, what):
        self.log("refused-control", directive=what)
        return 0xCC

    def power_cycle(self):
        return self._refuse("cycle")

    def power_reset(self):
        return self._refuse("reset")

    def pulse_diag(self):
        return self._refuse("diag")

    def power_shutdown(self):
        return self._refuse("shutdown")

    def get_boot_device(self):
        return "default"

    def set_boot_device(self, bootdevice):
        pass

    def handle_raw_request(self, request, session):
        session.last_seen = time.monotonic()
        self.log("request", netfn=request["netfn"], command=request["command"], data=list(request["data"]))
        if request["netfn"] == NETFN_APP and request["command"] == GET_SYSTEM_GUID:
            if self.system_guid == "unavailable":
                return session.send_ipmi_response(code=0xC1)
            guid = self.uuid.bytes if self.system_guid == "same" else bytes.fromhex(self.system_guid)
            return session.send_ipmi_response(data=list(guid))
        return super().handle_raw_request(request, session)

    def _active(self):
        now = time.monotonic()
        self.sessions = [s for s in self.sessions
                         if not getattr(s, "closed", False) and now - s.last_seen < self.idle_timeout]
        return len(self.sessions)

    def sessionless_data(self, data, sockaddr):
        opening = len(data) > 16 and data[4] == 6 and data[5] & 0x3F == OPEN_SESSION_REQUEST
        if opening and self.session_limit and self._active() >= self.session_limit:
            self.log("refused-open")
            tag, console_id = data[16], bytes(data[20:24])
            answer = bytes([tag, INSUFFICIENT_RESOURCES, 0, 0]) + console_id
            header = b"\x06\x00\xff\x07\x06" + bytes([OPEN_SESSION_RESPONSE]) + bytes(8)
            ipmisession._io_sendto(self.serversocket, header + len(answer).to_bytes(2, "little") + answer, sockaddr)
            return
        super().sessionless_data(data, sockaddr)
        if opening:
            session = ipmisession.Session.bmc_handlers.get(sockaddr, {}).get(self.port)
            if isinstance(session, serversession.ServerSession):
                session.last_seen = time.monotonic()
                self.sessions.append(session)
                self.log("open")


def patch_server_session(log, downgrade, tamper):
    """Close Session, and Open Session (--downgrade) and the replies sent (--tamper), observed or
    changed in pyghmi's server session."""
    def close_server_session(self):
        self.closed = True
        log("close")

    serversession.ServerSession.close_server_session = close_server_session
    if downgrade:
        original = serversession.ServerSession.create_open_session_response

        def create_open_session_response(self, request):
            response = original(self, request)
            for at in (16, 24, 32):  # the authentication, integrity and confidentiality algorithms
                response[at] = 0
            return response

        serversession.ServerSession.create_open_session_response = create_open_session_response
    if tamper:
        original_xmit = serversession.ServerSession._xmit_packet

        def _xmit_packet(self, *args, **kwargs):
            packet = bytes(self.netpacket)
            signed = len(packet) > 16 and packet[4] == 6 and packet[5] & 0x40
            if signed:
                forged = bytearray(packet)
                forged[-1] ^= 0x01  # the AuthCode's last byte
                other = bytearray(packet)
                other[6] ^= 0x01  # the session ID's low byte
                for variant in (forged, other):
                    ipmisession._io_sendto(self.socket, bytes(variant), self.sockaddr)
                log("tampered")
            original_xmit(self, *args, **kwargs)
            if signed:
                ipmisession._io_sendto(self.socket, packet, self.sockaddr)

        serversession.ServerSession._xmit_packet = _xmit_packet


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--guid", required=True, help="RAKP 2's GUID bytes, 32 hex digits")
    parser.add_argument("--user", default="admin:password", help="NAME:PASSWORD")
    parser.add_argument("--state-file", required=True)
    parser.add_argument("--power", choices=["On", "Off"], default="On")
    parser.add_argument("--system-guid", default="same", help="same | unavailable | 32 hex digits")
    parser.add_argument("--kg", help="the BMC key K_G (text)")
    parser.add_argument("--session-limit", type=int, default=0)
    parser.add_argument("--idle-timeout", type=float, default=60.0)
    parser.add_argument("--downgrade", action="store_true")
    parser.add_argument("--tamper", action="store_true")
    parser.add_argument("--log")
    args = parser.parse_args()
    if len(bytes.fromhex(args.guid)) != 16:
        parser.error("--guid takes 16 bytes")

    log = Log(args.log)
    patch_server_session(log, args.downgrade, args.tamper)
    server = TestBmc(args, log)
    print(f"ready {args.port}", flush=True)
    server.listen(timeout=1)


if __name__ == "__main__":
    sys.exit(main())
