#!/usr/bin/env python3
"""A fake OpenAI-compatible Chat Completions server for the Neovim plugin's tests.

Usage: fake_openai.py SCRIPT.json  -- prints its port on stdout, then serves.
SCRIPT.json is a list of replies, used in order, one per POST /v1/chat/completions:
  {"text": "answer"}                               text deltas (split in a few chunks)
  {"tool_calls": [{"id","name","arguments"}], "text"?: "..."}
  {"hang": true}                                   headers sent, then nothing until the client goes
  {"error": {"status": 400, "body": {...}}}        a JSON error answer (e.g. context_length_exceeded)
A text or tool-call reply may add "usage": {...}: OpenAI's usage object, sent as the last chunk.
Each request body is appended to SCRIPT.json + ".requests" (one JSON per line) for assertions,
and its Authorization header to SCRIPT.json + ".authorization" (one per line).
Python stdlib only.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

script_path = sys.argv[1]
with open(script_path) as f:
    replies = json.load(f)
lock = threading.Lock()
state = {"next": 0}


def chunk(delta, finish=None):
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # pen asks a local server for its context window (Ollama's POST /api/show among
        # others): only chat requests take a scripted reply; anything else is 404, as on a
        # server without that endpoint.
        if not self.path.endswith("/chat/completions"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            return
        with lock:
            i = state["next"]
            state["next"] += 1
            with open(script_path + ".requests", "a") as f:
                f.write(body.decode("utf-8", "replace").replace("\n", " ") + "\n")
            with open(script_path + ".authorization", "a") as f:
                f.write(self.headers.get("Authorization", "") + "\n")
        reply = replies[i] if i < len(replies) else {"text": "(no more scripted replies)"}
        if "error" in reply:
            # An API error: {"error": {"status": 400, "body": {...}}}
            body = json.dumps(reply["error"].get("body", {})).encode()
            self.send_response(reply["error"].get("status", 400))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        if reply.get("hang"):
            # Keep the stream open without data until the client disconnects (Stop).
            self.wfile.write(b": waiting\n\n")
            self.wfile.flush()
            try:
                while self.rfile.read(1):
                    pass
            except OSError:
                pass
            return
        events = [chunk({"role": "assistant", "content": ""})]
        text = reply.get("text", "")
        for k in range(0, len(text), 8):
            events.append(chunk({"content": text[k:k + 8]}))
        for n, call in enumerate(reply.get("tool_calls", [])):
            events.append(chunk({"tool_calls": [{
                "index": n, "id": call["id"], "type": "function",
                "function": {"name": call["name"], "arguments": ""}}]}))
            args = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                events.append(chunk({"tool_calls": [{"index": n, "function": {"arguments": part}}]}))
        events.append(chunk({}, "tool_calls" if reply.get("tool_calls") else "stop"))
        if "usage" in reply:
            events.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                           "model": "fake", "choices": [], "usage": reply["usage"]})
        try:
            for e in events:
                self.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
