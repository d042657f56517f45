"""A BMC without power, as its address looks: nothing answers a connection at all, not even with a
refusal. A listener whose accept queue is full drops every further SYN (Linux), so a client's connect
times out. Binds 127.0.0.1:PORT (where the BMC was), fills its queue, prints `dark`, and lives for
SECONDS (the test kills it sooner)."""

import argparse
import socket
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--seconds", type=float, default=600)
args = parser.parse_args()

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", args.port))
listener.listen(0)
fill = []
for _ in range(3):
    client = socket.socket()
    client.setblocking(False)
    try:
        client.connect(("127.0.0.1", args.port))
    except BlockingIOError:
        pass
    fill.append(client)
print("dark", flush=True)
time.sleep(args.seconds)
