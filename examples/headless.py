#!/usr/bin/env python3
"""Drive `pen serve` from a script over JSON-RPC (the LSP base protocol on stdio).

Python standard library only. Starts the daemon, initializes it on a workspace, opens a
document with unsaved content (as an editor would), asks pen_read for it and prints what pen
sees: the editor's text, not the file on disk.

    python3 examples/headless.py [--pen PATH] [--workspace DIR]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile


class PenClient:
    """A minimal JSON-RPC client for `pen serve`."""

    def __init__(self, pen, workspace):
        self.process = subprocess.Popen(
            [pen, "serve"],
            cwd=workspace,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.next_id = 1

    def send(self, message):
        body = json.dumps(message).encode("utf-8")
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def receive(self):
        length = None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("pen serve closed its output")
            line = line.strip()
            if not line:
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return json.loads(self.process.stdout.read(length))

    def request(self, method, params):
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            message = self.receive()
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']['message']}")
                return message["result"]
            # Notifications (pen/event, $/progress) and server requests would be handled here.

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def close(self):
        self.request("shutdown", None)
        self.notify("exit", None)
        self.process.stdin.close()
        return self.process.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pen", default=os.environ.get("PEN", "pen"), help="the pen binary")
    parser.add_argument("--workspace", help="workspace folder (default: a new temp folder)")
    args = parser.parse_args()

    workspace = pathlib.Path(args.workspace or tempfile.mkdtemp(prefix="pen-headless-")).resolve()
    path = workspace / "notes.md"
    path.write_text("saved on disk\n", encoding="utf-8")

    pen = args.pen if os.sep not in args.pen else str(pathlib.Path(args.pen).resolve())
    client = PenClient(pen, workspace)
    client.request(
        "initialize",
        {
            "processId": os.getpid(),
            "rootUri": path.parent.as_uri(),
            "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}},
        },
    )
    client.notify("initialized", {})
    client.notify(
        "textDocument/didOpen",
        {
            "textDocument": {
                "uri": path.as_uri(),
                "languageId": "markdown",
                "version": 1,
                "text": "unsaved in the editor\r\n",
            }
        },
    )
    page = client.request("pen/callTool", {"name": "pen_read", "arguments": {"path": "notes.md"}})
    sys.stdout.write(page["content"])
    print(f"(source: {page['source']}, eol: {page['eol']}, hash: {page['hash']})")
    return client.close()


if __name__ == "__main__":
    sys.exit(main())
