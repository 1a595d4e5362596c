"""An ACP client built on the official Python SDK (agent-client-protocol), driving `pen acp`.

Run by tests/suite/acp.rs, which starts the fake model provider, scripts its answers and
passes the scenario's name; this script speaks ACP to a real `pen acp` child, asserts what
the protocol shows, and prints one JSON line of what it saw for the Rust side to check
against the provider's requests, the disk and the session database.

    PEN_ACP_PEN=target/debug/pen python client.py SCENARIO WORKSPACE [SESSION_ID]
"""

import asyncio
import json
import os
import shutil
import sys

import acp
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    McpServerStdio,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)

# Every wait on pen is bounded; a hung pen fails the test instead of hanging it.
WAIT_SECONDS = 30


class Client:
    """Records everything pen sends; answers permissions from a script, files from buffers."""

    def __init__(self, answers=(), buffers=None, lagging=False):
        self.updates = []
        # A client that saves a write and updates its buffer later: a read right after a write
        # still gets the text before it.
        self.lagging = lagging
        self.permissions = []
        self.answers = list(answers)
        self.buffers = dict(buffers or {})
        self.reads = []
        self.writes = []
        self.changed = asyncio.Event()
        # Set by a scenario to be told of a permission request as it arrives.
        self.on_permission = None

    def _changed(self):
        self.changed.set()

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(by_alias=True, exclude_none=True))
        self._changed()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(
            {
                "tool_call": tool_call.model_dump(by_alias=True, exclude_none=True),
                "options": [o.model_dump(by_alias=True) for o in options],
            }
        )
        self._changed()
        if self.on_permission is not None:
            return await self.on_permission()
        answer = self.answers.pop(0)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def read_text_file(self, session_id, path, line=None, limit=None, **kwargs):
        self.reads.append(path)
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        with open(path, encoding="utf-8", newline="") as f:
            return ReadTextFileResponse(content=f.read())

    async def write_text_file(self, session_id, path, content, **kwargs):
        self.writes.append({"path": path, "content": content})
        if not self.lagging:
            self.buffers[path] = content
        return WriteTextFileResponse()

    async def until(self, condition, what):
        """Waits until `condition()` holds: notifications are handled in their own tasks, so
        one may land just after the answer that followed it on the wire."""

        async def wait():
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(wait(), WAIT_SECONDS)
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; updates: {self.updates}")

    def of_kind(self, kind):
        return [u for u in self.updates if u["sessionUpdate"] == kind]

    def text(self):
        return "".join(u["content"]["text"] for u in self.of_kind("agent_message_chunk"))

    def finished(self):
        return [
            u
            for u in self.of_kind("tool_call_update")
            if u.get("status") in ("completed", "failed")
        ]


def capabilities(fs):
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=False
    )


async def connect(client, workspace, fs=False):
    pen = os.environ["PEN_ACP_PEN"]
    context = acp.spawn_agent_process(client, pen, "acp", cwd=workspace, env=dict(os.environ))
    conn, process = await context.__aenter__()
    init = await asyncio.wait_for(
        conn.initialize(protocol_version=1, client_capabilities=capabilities(fs)), WAIT_SECONDS
    )
    assert init.protocol_version == 1, init
    assert init.agent_capabilities.load_session is True, init
    assert init.agent_capabilities.prompt_capabilities.embedded_context is True, init
    return context, conn


async def prompt(conn, session_id, text):
    response = await asyncio.wait_for(
        conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), WAIT_SECONDS
    )
    return response.stop_reason


async def stream(workspace):
    client = Client()
    context, conn = await connect(client, workspace)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    assert [m.id for m in session.modes.available_modes] == ["ask", "allow_edits"], session
    response = await asyncio.wait_for(
        conn.prompt(session_id=session.session_id, prompt=[acp.text_block("say hello")]),
        WAIT_SECONDS,
    )
    assert response.stop_reason == "end_turn", response
    await client.until(lambda: client.text() == "Hello, world", "the streamed text")
    assert len(client.of_kind("agent_message_chunk")) >= 2, client.updates
    await context.__aexit__(None, None, None)
    # pen's usage extension, as the SDK hands it over (`_meta`).
    return {"session_id": session.session_id, "meta": getattr(response, "field_meta", None)}


async def tools(workspace):
    """A read, an edit allowed once, an edit rejected once, a command rejected always (its
    second call is denied without asking), an edit allowed always (the next one runs)."""
    client = Client(answers=["allow_once", "reject_once", "reject_always", "allow_always"])
    context, conn = await connect(client, workspace)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    sid = session.session_id
    real = os.path.realpath(os.path.join(workspace, "a.txt"))

    assert await prompt(conn, sid, "edit a.txt") == "end_turn"
    await client.until(lambda: len(client.finished()) == 2, "two finished calls")
    calls = client.of_kind("tool_call")
    assert [c["kind"] for c in calls] == ["read", "edit"], calls
    assert calls[0]["title"] == "pen_read a.txt", calls[0]
    assert calls[0]["locations"][0]["path"] == real, calls[0]
    assert calls[1]["status"] == "pending", calls[1]
    asked = client.permissions[0]
    kinds = [o["kind"] for o in asked["options"]]
    assert kinds == ["allow_once", "allow_always", "reject_once", "reject_always"], kinds
    [planned] = asked["tool_call"]["content"]
    assert planned == {
        "type": "diff",
        "path": real,
        "oldText": "one\ntwo\n",
        "newText": "one\nTWO\n",
    }, planned
    read, edit = client.finished()
    assert read["status"] == "completed", read
    assert read["content"][0]["type"] == "content", read
    assert edit["status"] == "completed", edit
    assert edit["content"][0] == planned, edit

    client.updates.clear()
    assert await prompt(conn, sid, "edit it again") == "end_turn"
    await client.until(lambda: len(client.finished()) == 1, "the rejected edit")
    [rejected] = client.finished()
    assert rejected["status"] == "failed", rejected
    assert all(c["type"] == "content" for c in rejected["content"]), rejected

    client.updates.clear()
    assert await prompt(conn, sid, "run a command twice") == "end_turn"
    await client.until(lambda: len(client.finished()) == 2, "two denied commands")
    assert len(client.permissions) == 3, "the second command was not asked about"
    assert [c["kind"] for c in client.of_kind("tool_call")] == ["execute", "execute"]
    assert [u["status"] for u in client.finished()] == ["failed", "failed"]

    client.updates.clear()
    assert await prompt(conn, sid, "two edits") == "end_turn"
    await client.until(lambda: len(client.finished()) == 2, "two edits")
    assert len(client.permissions) == 4, "the second edit was asked about"
    assert [u["status"] for u in client.finished()] == ["completed", "completed"]
    await context.__aexit__(None, None, None)
    return {"session_id": sid, "permissions": len(client.permissions)}


async def cancel(workspace):
    """Cancel while the model streams, then cancel while a permission is pending."""
    client = Client()
    context, conn = await connect(client, workspace)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    sid = session.session_id

    turn = asyncio.ensure_future(prompt(conn, sid, "think for a long time"))
    await client.until(lambda: client.text() != "", "the first chunk")
    await conn.cancel(session_id=sid)
    assert await turn == "cancelled"

    client.updates.clear()
    asked = asyncio.Event()

    async def on_permission():
        asked.set()
        # As the spec asks of a client: cancel the turn, answer pending permissions cancelled.
        await conn.cancel(session_id=sid)
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    client.on_permission = on_permission
    turn = asyncio.ensure_future(prompt(conn, sid, "run a command"))
    assert await turn == "cancelled"
    assert asked.is_set()
    await client.until(lambda: len(client.finished()) == 1, "the stopped call's end")
    [stopped] = client.finished()
    assert stopped["status"] == "failed", stopped
    await context.__aexit__(None, None, None)
    return {"session_id": sid}


async def load(workspace, session_id):
    """A new pen process loads the session: its transcript replays, then a prompt goes on."""
    client = Client()
    context, conn = await connect(client, workspace)
    await asyncio.wait_for(
        conn.load_session(cwd=workspace, session_id=session_id, mcp_servers=[]), WAIT_SECONDS
    )
    # Replayed before load_session answered; handled, maybe, a moment after.
    await client.until(lambda: len(client.of_kind("tool_call_update")) == 1, "the replay")
    kinds = [u["sessionUpdate"] for u in client.updates]
    assert kinds == [
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ], kinds
    assert client.updates[0]["content"]["text"] == "read a.txt"
    assert client.updates[1]["kind"] == "read"
    assert client.updates[3]["content"]["text"] == "It says one, two."
    client.updates.clear()
    assert await prompt(conn, session_id, "and now?") == "end_turn"
    await client.until(lambda: client.text() == "Still one, two.", "the continued answer")
    await context.__aexit__(None, None, None)
    return {"session_id": session_id}


async def plan(workspace):
    """Two pen_plan calls: each reaches the client as a `plan` update holding every entry, in
    order, and asks nothing; a new pen process loading the session replays them."""
    client = Client()
    context, conn = await connect(client, workspace)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    assert await prompt(conn, session.session_id, "fix the parser") == "end_turn"
    await client.until(lambda: len(client.of_kind("plan")) == 2, "two plan updates")
    plans = [u["entries"] for u in client.of_kind("plan")]
    asked = len(client.permissions)
    await context.__aexit__(None, None, None)
    replay = Client()
    context, conn = await connect(replay, workspace)
    await asyncio.wait_for(
        conn.load_session(cwd=workspace, session_id=session.session_id, mcp_servers=[]),
        WAIT_SECONDS,
    )
    await replay.until(lambda: len(replay.of_kind("plan")) == 2, "the replayed plans")
    replayed = [u["entries"] for u in replay.of_kind("plan")]
    await context.__aexit__(None, None, None)
    return {"session_id": session.session_id, "plans": plans, "replayed": replayed, "asked": asked}


async def client_fs(workspace):
    """The client holds crlf.txt unsaved (CRLF); pen reads that buffer and edits through it."""
    real = os.path.realpath(os.path.join(workspace, "crlf.txt"))
    unsaved = "\ufeffline one\r\nline two\r\n"
    client = Client(answers=["allow_once"], buffers={real: unsaved})
    context, conn = await connect(client, workspace, fs=True)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    assert await prompt(conn, session.session_id, "fix crlf.txt") == "end_turn"
    await client.until(lambda: len(client.finished()) == 3, "the read, the search, the edit")
    assert real in client.reads, client.reads
    # The search asked for the buffer it had read, never for the workspace's other files.
    assert set(client.reads) == {real}, client.reads
    assert client.writes == [
        {"path": real, "content": "\ufeffline one\r\nline 2\r\n"}
    ], client.writes
    [planned] = client.permissions[0]["tool_call"]["content"]
    assert planned["oldText"] == unsaved, planned
    assert planned["newText"] == "\ufeffline one\r\nline 2\r\n", planned
    await context.__aexit__(None, None, None)
    return {"session_id": session.session_id, "writes": client.writes}


async def client_fs_stale(workspace):
    """The owner types in the buffer while the permission dialog is open: the approved edit
    no longer applies to the text, so nothing is written."""
    real = os.path.realpath(os.path.join(workspace, "crlf.txt"))
    client = Client(buffers={real: "line one\r\nline two\r\n"})

    async def owner_types_then_allows():
        client.buffers[real] = "line one\r\nline two\r\nline three\r\n"
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id="allow_once")
        )

    client.on_permission = owner_types_then_allows
    context, conn = await connect(client, workspace, fs=True)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    assert await prompt(conn, session.session_id, "fix crlf.txt") == "end_turn"
    await client.until(lambda: len(client.finished()) == 2, "the read and the edit")
    assert client.writes == [], client.writes
    edit = client.finished()[1]
    assert edit["status"] == "failed", edit
    assert "approval no longer applies" in json.dumps(edit["content"]), edit
    await context.__aexit__(None, None, None)
    return {"session_id": session.session_id}


async def client_fs_lagging(workspace):
    """The client's buffer still holds the old text when pen reads it after its write (the
    client saves and refreshes later): the edit's diff is the edit pen planned and wrote, not
    that re-read (issue 26, item 14)."""
    real = os.path.realpath(os.path.join(workspace, "a.txt"))
    client = Client(
        answers=["allow_once", "allow_once"], buffers={real: "one\ntwo\n"}, lagging=True
    )
    context, conn = await connect(client, workspace, fs=True)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    assert await prompt(conn, session.session_id, "edit a.txt") == "end_turn"
    await client.until(lambda: len(client.finished()) == 3, "the read, the edit, the create")
    assert client.writes[0] == {"path": real, "content": "one\nTWO\n"}, client.writes
    expected = {"type": "diff", "path": real, "oldText": "one\ntwo\n", "newText": "one\nTWO\n"}
    [planned] = client.permissions[0]["tool_call"]["content"]
    assert planned == expected, planned
    _, edit, create = client.finished()
    assert edit["status"] == "completed", edit
    assert edit["content"][0] == expected, edit
    made = os.path.realpath(os.path.join(workspace, "made.txt"))
    assert create["status"] == "completed", create
    assert create["content"][0] == {"type": "diff", "path": made, "newText": "made\n"}, create
    await context.__aexit__(None, None, None)
    return {"session_id": session.session_id, "writes": client.writes}


async def modes(workspace):
    """In allow_edits mode an edit runs without asking; an unknown mode is refused."""
    client = Client()
    context, conn = await connect(client, workspace)
    session = await conn.new_session(cwd=workspace, mcp_servers=[])
    sid = session.session_id
    assert session.modes.current_mode_id == "ask", session
    try:
        await conn.set_session_mode(session_id=sid, mode_id="yolo")
        raise AssertionError("an unknown mode was accepted")
    except acp.RequestError as e:
        assert "allow_edits" in str(e), e
    await conn.set_session_mode(session_id=sid, mode_id="allow_edits")
    assert await prompt(conn, sid, "edit a.txt") == "end_turn"
    await client.until(lambda: len(client.finished()) == 2, "the read and the edit")
    assert client.permissions == [], client.permissions
    assert [u["status"] for u in client.finished()] == ["completed", "completed"]
    await context.__aexit__(None, None, None)
    return {"session_id": sid}


async def mcp(workspace, entry):
    """The client's MCP server (server-everything over stdio, a name with a space) starts
    through pen's MCP client; its echo tool asks for permission and its result comes back."""
    client = Client(answers=["allow_once"])
    context, conn = await connect(client, workspace)
    node = shutil.which("node")
    assert node, "node is on PATH"
    server = McpServerStdio(name="every thing", command=node, args=[entry, "stdio"], env=[])
    session = await conn.new_session(cwd=workspace, mcp_servers=[server])
    assert await prompt(conn, session.session_id, "echo through MCP") == "end_turn"
    await client.until(lambda: len(client.finished()) == 1, "the MCP call")
    assert len(client.permissions) == 1, client.permissions
    call = client.of_kind("tool_call")[0]
    assert call["title"].startswith("mcp__every_thing__echo"), call
    done = client.finished()[0]
    assert done["status"] == "completed", done
    assert "hello over acp" in json.dumps(done["content"]), done
    await context.__aexit__(None, None, None)
    return {"session_id": session.session_id}


async def main():
    scenario, workspace = sys.argv[1], sys.argv[2]
    runs = {
        "stream": lambda: stream(workspace),
        "tools": lambda: tools(workspace),
        "cancel": lambda: cancel(workspace),
        "load": lambda: load(workspace, sys.argv[3]),
        "client_fs": lambda: client_fs(workspace),
        "modes": lambda: modes(workspace),
        "plan": lambda: plan(workspace),
        "client_fs_stale": lambda: client_fs_stale(workspace),
        "client_fs_lagging": lambda: client_fs_lagging(workspace),
        "mcp": lambda: mcp(workspace, sys.argv[3]),
    }
    seen = await runs[scenario]()
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
