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

vLLM's sleep, as the vLLM stand-in (tests/fixtures/vllm_stand_in.ts) has it from
vLLM's source, so that gpu-check runs `engine: vllm` cards with `sleep_after`:

- `POST /v1/chat/completions`, `/v1/completions` (stream or not): `--tokens N`
  (default 8; fewer when `max_tokens` asks) tokens, one every `--token-ms N`
  (default 10). While asleep a request is parked, not refused: it runs after the
  wake. `GET /metrics`: vLLM's request gauges and token counters (a parked
  request is in neither gauge).
- `GET /load`: `{"server_load": N}`, the requests its handlers hold (parked ones
  included) with `--enable-server-load-tracking`, else 0. `GET /version`:
  `{"version": "0.17.0"}` (`--version-string`), a build whose sleep parks.
- Only with `VLLM_SERVER_DEV_MODE=1` (else 404): `POST /sleep?level=1&mode=wait`
  pauses (new requests park; `wait` lets the running ones end first), then at
  level 1 with `--enable-sleep-mode` frees its tensor and calls
  `torch.cuda.empty_cache()`: the CUDA context stays (its residue as nvidia-smi
  counts it). `POST /wake_up` allocates the tensor again and resumes; on
  `torch.cuda.OutOfMemoryError` it answers 500 as vLLM does ("Call to wake_up
  method failed: CUDA Error: out of memory …") and stays asleep, its requests
  parked. `GET /is_sleeping`: `{"is_sleeping": bool}`. Its sleep and wake print
  vLLM's lines (`Sleep mode freed …`, `It took … seconds to wake up tags …`).

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


STRINGS = ("host", "version-string")


def parse(argv):
    opts = {
        "host": "127.0.0.1",
        "port": None,
        "tokens": 8,
        "token-ms": 10,
        "version-string": "0.17.0",
        "enable-sleep-mode": False,
        "enable-server-load-tracking": False,
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
            opts[name] = value if name in STRINGS else int(value)
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


def vllm_line(where, text):
    """A line as vLLM's logger prints it (`INFO 12-07 23:01:02 [file.py:123] text`)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"INFO {stamp} [{where}] {text}", flush=True)


class Sleeper:
    """Sleep, wake and parked requests, around the held tensor."""

    def __init__(self, opts, block):
        self.opts = opts
        self.block = block
        self.cond = threading.Condition()
        self.paused = False  # new requests park
        self.freed = False  # the tensor is freed (level 1)
        self.running = 0  # generating now
        self.load = 0  # in its handlers, parked ones included
        self.prompt_tokens = 0
        self.generated = 0

    def sleep(self, level, mode):
        if mode not in ("abort", "wait", "keep"):
            return 500, f"Call to sleep method failed: Invalid pause mode: {mode}"
        with self.cond:
            self.paused = True
            if mode == "wait":
                while self.running > 0:
                    self.cond.wait()
        if level < 1 or self.freed:
            return 200, None
        mib = self.opts["hold-mib"]
        freed = 0
        if self.opts["enable-sleep-mode"] and self.block is not None:
            import torch

            self.block = None
            torch.cuda.empty_cache()
            freed = mib
        self.freed = True
        vllm_line(
            "gpu_worker.py:104",
            f"Sleep mode freed {freed / 1024:.2f} GiB memory, {used_gib():.2f} GiB memory is still in use.",
        )
        return 200, None

    def wake(self):
        began = time.monotonic()
        vllm_line("api_router.py:36", "wake up the engine with tags: None")
        if self.freed and self.opts["enable-sleep-mode"] and self.opts["hold-mib"] > 0:
            import torch

            try:
                self.block, _ = hold(self.opts["hold-mib"])
            except RuntimeError as error:  # torch.cuda.OutOfMemoryError is one
                if "out of memory" not in str(error):
                    raise
                self.block = None
                torch.cuda.empty_cache()
                message = f"CUDA Error: out of memory at {error}".splitlines()[0]
                print(message, file=sys.stderr, flush=True)
                return 500, f"Call to wake_up method failed: {message}"
        self.freed = False
        took = time.monotonic() - began
        vllm_line(
            "gpu_worker.py:145",
            f"It took {took:.6f} seconds to wake up tags ['kv_cache', 'weights'].",
        )
        with self.cond:
            self.paused = False
            self.cond.notify_all()
        return 200, None

    def is_sleeping(self):
        return self.paused or self.freed

    def enter(self):
        with self.cond:
            self.load += 1

    def leave(self):
        with self.cond:
            self.load -= 1

    def admitted(self, prompt):
        """Parks while asleep; then counts as running."""
        with self.cond:
            while self.paused:
                self.cond.wait()
            self.running += 1
            self.prompt_tokens += prompt

    def token(self):
        time.sleep(self.opts["token-ms"] / 1000)
        with self.cond:
            self.generated += 1

    def finished(self):
        with self.cond:
            self.running -= 1
            self.cond.notify_all()


def used_gib():
    """The device's memory in use (vLLM's `still in use`), 0 without PyTorch loaded."""
    if "torch" not in sys.modules:
        return 0.0
    import torch

    free, total = torch.cuda.mem_get_info()
    return (total - free) / 1024**3


def metrics(sleeper, model):
    labels = f'engine="0",model_name="{model}"'
    return "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(sleeper.running)}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} 0.0",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {float(sleeper.prompt_tokens)}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {float(sleeper.generated)}",
            "",
        ]
    )


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
    argv = sys.argv[1:]
    opts = parse(argv)
    model = argv[1] if len(argv) > 1 and argv[0] == "serve" else "model"
    if "--served-model-name" in argv[:-1]:
        model = argv[argv.index("--served-model-name") + 1]
    dev = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
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

    sleeper = Sleeper(opts, block)
    block = None  # the sleeper holds it now

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/health":
                if opts["hang"]:
                    while True:
                        time.sleep(3600)
                if now_ms() < ready_at:
                    self.answer(503, {"error": "Loading model"})
                else:
                    self.answer(200, None)
            elif path == "/v1/models":
                self.answer(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            elif path == "/version":
                self.answer(200, {"version": opts["version-string"]})
            elif path == "/load":
                tracked = opts["enable-server-load-tracking"]
                self.answer(200, {"server_load": sleeper.load if tracked else 0})
            elif path == "/metrics":
                self.text(200, metrics(sleeper, model))
            elif path == "/is_sleeping" and dev:
                self.answer(200, {"is_sleeping": sleeper.is_sleeping()})
            else:
                self.answer(404, {"detail": "Not Found"})

        def do_POST(self):
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path in ("/v1/chat/completions", "/v1/completions"):
                return self.completion(path, raw)
            if not dev or path not in ("/sleep", "/wake_up"):
                return self.answer(404, {"detail": "Not Found"})
            if path == "/wake_up":
                status, message = sleeper.wake()
            else:
                params = dict(p.partition("=")[::2] for p in query.split("&") if p)
                try:
                    level = int(params.get("level", "1"))
                except ValueError:
                    return self.error(400, "BadRequestError", "invalid level")
                status, message = sleeper.sleep(level, params.get("mode", "abort"))
            if status == 200:
                self.answer(200, None)
            else:
                self.error(status, "InternalServerError", message)

        def completion(self, path, raw):
            chat = path.endswith("chat/completions")
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            asked = body.get("max_tokens")
            tokens = opts["tokens"] if not isinstance(asked, int) else min(asked, opts["tokens"])
            sleeper.enter()
            try:
                sleeper.admitted(1)
                try:
                    if body.get("stream") is True:
                        self.stream(chat, tokens)
                    else:
                        out = ""
                        for i in range(tokens):
                            sleeper.token()
                            out += f" t{i}"
                        choice = {"index": 0, "finish_reason": "length"}
                        choice.update({"message": {"role": "assistant", "content": out}} if chat else {"text": out})
                        self.answer(200, {"object": "chat.completion" if chat else "text_completion", "model": model, "choices": [choice]})
                finally:
                    sleeper.finished()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away
            finally:
                sleeper.leave()

        def stream(self, chat, tokens):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.end_headers()
            kind = "chat.completion.chunk" if chat else "text_completion"

            def send(text, finish):
                choice = {"index": 0, "finish_reason": finish}
                choice.update({"delta": {"content": text}} if chat else {"text": text})
                chunk = {"object": kind, "model": model, "choices": [choice]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            for i in range(tokens):
                sleeper.token()
                send(f" t{i}", None)
            send("", "length")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def error(self, status, kind, message):
            body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
            self.answer(status, body)

        def text(self, status, text):
            data = text.encode()
            self.send_response(status)
            self.send_header("content-length", str(len(data)))
            self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            self.end_headers()
            self.wfile.write(data)

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
    server.serve_forever()  # the sleeper keeps its tensor referenced (and held) while awake


if __name__ == "__main__":
    main()
