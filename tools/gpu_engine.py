#!/usr/bin/env python3
"""An engine that holds real GPU memory, for `deno task gpu-check` (tools/gpu_check.ts).

It plays an inference engine for the launcher on a machine with NVIDIA GPUs, as the
stand-in engine (tests/fixtures/fake_engine.ts) does without one: the launcher runs it
as `vllm` (gpu-check puts a wrapper of that name first on PATH) and it ignores the
flags it does not know (`serve MODEL`, `--served-model-name`, `--gpu-memory-utilization`).

- `--hold-mib N`: allocate N MiB with PyTorch on its visible device (`torch.empty`:
  no weights, nothing downloaded) before it listens; 0 imports no torch at all.
- `--load-ms N`: once allocated, answer `GET /health` 503 for N ms, then 200.
- `--crash-after-ms N`: exit with code 3 (or `--exit-code N`) N ms after the
  allocation: an engine failing during its load.
- `--ignore-sigterm`: survive SIGTERM (only SIGKILL ends it).
- `--hang`: accept `/health` but never answer.
- `--no-listen`: hold the memory and serve nothing (a process outside the launcher).
- `--host`, `--port`: where to listen (the launcher passes both).

When `GPU_ENGINE_RECORD_DIR` is set it writes `<dir>/<port>.json` (or `<pid>.json`
without a port) once allocated: its pid, `startedAt` and `readyAt` (ms since the
epoch), `CUDA_VISIBLE_DEVICES`, the devices it sees (count, name, uuid) and the MiB
it holds. Standard library and PyTorch only.
"""

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MIB = 1024 * 1024


def now_ms():
    return int(time.time() * 1000)


def parse(argv):
    opts = {
        "host": "127.0.0.1",
        "port": None,
        "hold-mib": 0,
        "load-ms": 0,
        "crash-after-ms": 0,
        "exit-code": 3,
        "ignore-sigterm": False,
        "hang": False,
        "no-listen": False,
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg[2:] if arg.startswith("--") else None
        if name in opts and isinstance(opts[name], bool):
            opts[name] = True
        elif name in opts and i + 1 < len(argv):
            value = argv[i + 1]
            opts[name] = value if name == "host" else int(value)
            i += 1
        i += 1
    return opts


def hold(mib):
    """Allocates `mib` MiB on cuda:0 (the first visible device); returns what it sees."""
    if mib <= 0:
        return None, {"count": 0}
    import torch  # only when memory is asked for: the HTTP side is testable without it

    block = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    seen = {
        "count": torch.cuda.device_count(),
        "name": props.name,
        "uuid": None if uuid is None else "GPU-" + str(uuid),
        "totalMiB": props.total_memory // MIB,
    }
    return block, seen


def record(opts, fields):
    directory = os.environ.get("GPU_ENGINE_RECORD_DIR")
    if not directory:
        return
    name = str(opts["port"]) if opts["port"] is not None else str(os.getpid())
    path = os.path.join(directory, name + ".json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(fields, f)
    os.replace(tmp, path)


def main():
    opts = parse(sys.argv[1:])
    started = now_ms()
    if opts["ignore-sigterm"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    block, seen = hold(opts["hold-mib"])  # noqa: F841 (held until exit)
    allocated = now_ms()
    ready_at = allocated + opts["load-ms"]
    record(
        opts,
        {
            "pid": os.getpid(),
            "startedAt": started,
            "allocatedAt": allocated,
            "readyAt": ready_at,
            "env": {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")},
            "devices": seen,
            "heldMiB": opts["hold-mib"],
        },
    )
    if opts["crash-after-ms"] > 0:
        code = opts["exit-code"]
        timer = threading.Timer(opts["crash-after-ms"] / 1000, lambda: os._exit(code))
        timer.daemon = True
        timer.start()
    if opts["no-listen"] or opts["port"] is None:
        while True:
            time.sleep(3600)

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                if opts["hang"]:
                    while True:
                        time.sleep(3600)
                if now_ms() < ready_at:
                    self.answer(503, {"error": "Loading model"})
                else:
                    self.answer(200, None)
            elif self.path == "/v1/models":
                self.answer(200, {"object": "list", "data": []})
            else:
                self.answer(404, {"error": "not found"})

        def answer(self, status, body):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-length", str(len(data)))
            if body is not None:
                self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass  # the launcher polls every interval: no line per poll

    server = ThreadingHTTPServer((opts["host"], opts["port"]), Health)
    server.daemon_threads = True
    print(f"gpu_engine: holding {opts['hold-mib']} MiB, listening on {opts['port']}", flush=True)
    server.serve_forever()  # `block` stays referenced (and held) while main runs


if __name__ == "__main__":
    main()
