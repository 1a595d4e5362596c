"""A hostile MCP server for tests/suite/mcp.rs: raw newline-delimited JSON-RPC on stdio (the
Python standard library only), doing on purpose what a broken or malicious server may do.

Run as `python hostile_server.py SPEC`, SPEC a JSON object:
- "tools": the tool entries `tools/list` answers, exactly as given (a bad schema, an empty or
  path-like name, two servers' colliding names...);
- "label": the server's name in the answers of tools without a behaviour of their own.

Whatever the listed tools, `tools/call` does by the tool's name:
- `echo`: answers `{message}` as text;
- `huge`: answers a text of `{bytes}` bytes (one JSON-RPC line over rmcp's 16 MiB limit);
- `flood`: answers, then streams `notifications/message` of `{payload_bytes}` bytes, every
  `{every}`th one a `notifications/tools/list_changed`, at most `{count}` of them and for at
  most `{seconds}` s (it stops by itself), until pen closes its stdin; every 1,000 it writes
  how many it sent to the file `{progress}` (replaced whole, so a reader never sees half);
- `stall_lists`: from now on `tools/list` is never answered; sends one list_changed, then
  answers;
- `hang`: never answers;
- any other: answers `{label} ran {name}`, so a test sees which server a call reached.
Any other request gets "method not found" (so pen falls back to the `initialize` handshake).
"""

import json
import os
import sys
import threading
import time

SPEC = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
TOOLS = SPEC.get("tools", [])
LABEL = SPEC.get("label", "hostile")
OUT = sys.stdout.buffer
LOCK = threading.Lock()
STALLED = threading.Event()
CLOSED = threading.Event()


def send(message):
    line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    with LOCK:
        try:
            OUT.write(line)
            OUT.flush()
        except (BrokenPipeError, ValueError):
            CLOSED.set()


def answer(request_id, result):
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def text(request_id, words):
    answer(request_id, {"content": [{"type": "text", "text": words}]})


def progress(path, sent):
    if path:
        with open(path + ".tmp", "w") as out:
            out.write(str(sent))
        os.replace(path + ".tmp", path)


def flood(payload_bytes, every, count, seconds, progress_path):
    payload = "f" * payload_bytes
    deadline = time.monotonic() + seconds
    for n in range(count):
        if CLOSED.is_set() or time.monotonic() > deadline:
            return
        if n % 1000 == 0:
            progress(progress_path, n)
        if n % every == 0:
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        else:
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "logger": "flood", "data": payload}})


def call(request_id, name, arguments):
    if name == "echo":
        text(request_id, str(arguments.get("message", "")))
    elif name == "huge":
        text(request_id, "x" * int(arguments.get("bytes", 0)))
    elif name == "flood":
        text(request_id, "flooding")
        threading.Thread(target=flood, daemon=True, args=(
            int(arguments.get("payload_bytes", 1024)),
            max(1, int(arguments.get("every", 10))),
            int(arguments.get("count", 2_000_000)),
            float(arguments.get("seconds", 120)),
            arguments.get("progress"),
        )).start()
    elif name == "stall_lists":
        STALLED.set()
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text(request_id, "tools/list stalls from now on")
    elif name == "hang":
        pass
    else:
        text(request_id, f"{LABEL} ran {name}")


def main():
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method = message.get("method")
        request_id = message.get("id")
        if request_id is None:
            continue  # a notification
        params = message.get("params") or {}
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "pen-test-hostile", "version": "1"},
            })
        elif method == "tools/list":
            if not STALLED.is_set():
                answer(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            call(request_id, params.get("name"), params.get("arguments") or {})
        elif method == "ping":
            answer(request_id, {})
        else:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": f"method not found: {method}"}})
    CLOSED.set()


if __name__ == "__main__":
    main()
