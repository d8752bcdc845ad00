"""The Python reference of bench/start_compare.ts: a minimal launcher that
spawns each engine (argv: port count engine...) in its own session, its
stdout and stderr piped, then listens on a port and says so, as the launcher
does. It stops its children on SIGTERM."""
import signal
import socket
import subprocess
import sys

port, count, engine = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
children = []


def stop(*_):
    for child in children:
        child.kill()
        child.wait()
    sys.exit(0)


# Before the first child: a SIGTERM right after "listening" must not orphan them.
signal.signal(signal.SIGTERM, stop)
children += [
    subprocess.Popen(
        engine,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    for _ in range(count)
]
server = socket.create_server(("127.0.0.1", port))
print(f"listening on http://127.0.0.1:{port}/", file=sys.stderr, flush=True)

while True:
    server.accept()[0].close()
