"""Drives `agentrun mcp` with the official MCP Python SDK, one scenario per invocation.

Usage: client.py SCENARIO AGENTRUN STORE [URL]

Each scenario starts the server as an MCP client would (stdio), checks what it must, and exits
non-zero with a message on the first failure. The Rust tests in tests/mcp_python.rs run one
scenario each.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import anyio
import jsonschema
from mcp import types
from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import PaginatedRequestParams

HINT = re.compile(r'read\(filePath="(artifact://[0-9a-f]{64}(?:/[A-Za-z0-9._-]+)?)", offset=(\d+)\)')
PY = sys.executable


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def server(agentrun, store, *allow):
    args = ["--store", store, "mcp", "--structured-content"]
    for program in allow:
        args += ["--allow", program]
    return StdioServerParameters(command=agentrun, args=args, env=dict(os.environ))


async def session_for(params, body):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await body(session)


def text_of(result, index=0):
    return result.content[index].text


async def conformance(agentrun, store):
    # Lines of varying length, some empty, one with a tab and one with UTF-8.
    program = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "for i in range(300000):\n"
        "    out.write(('%d %s\\n' % (i, 'x' * (i % 53))).encode())\n"
        "out.write('last line é\\twithout newline'.encode())\n"
    )
    expected = b"".join(("%d %s\n" % (i, "x" * (i % 53))).encode() for i in range(300000))
    expected += "last line é\twithout newline".encode()

    async def body(session):
        info = session.initialize_result
        check(info.server_info.name == "agentrun", f"server name: {info.server_info}")
        check(info.capabilities.tools is not None, "tools capability")
        check(info.capabilities.resources is not None, "resources capability")

        tools = {t.name: t for t in (await session.list_tools()).tools}
        check(set(tools) == {"run", "read", "agent", "compact", "fanout"}, f"tools: {sorted(tools)}")
        for tool in tools.values():
            jsonschema.Draft202012Validator.check_schema(tool.input_schema)
            check(tool.input_schema.get("type") == "object", f"{tool.name} schema type")
            check(len(tool.description or "") > 100, f"{tool.name} has a real description")
        check(tools["run"].input_schema["required"] == ["command"], "run requires command")
        check(tools["read"].input_schema["required"] == ["filePath"], "read requires filePath")
        check(tools["agent"].input_schema["required"] == ["harness", "prompt"], "agent requires harness, prompt")
        check(tools["compact"].input_schema["required"] == ["transcriptPath"], "compact requires transcriptPath")

        result = await session.call_tool("run", {"command": [PY, "-c", program]})
        check(not result.is_error, f"run failed: {result.content}")
        text = text_of(result)
        check(text.rstrip().endswith("]") and "[Exit code 0 after" in text, f"status line: {text[-200:]}")
        record = result.structured_content["record"]
        stdout = next(s for s in record["output"]["streams"] if s["name"] == "stdout")
        check(stdout["sha256"] == hashlib.sha256(expected).hexdigest(), "retained stdout digest")
        check(stdout["lines"] == 300001 and stdout["bytes"] == len(expected), "stdout counts")
        check(len(text.encode()) < 120_000, f"the preview is bounded: {len(text.encode())} bytes")

        # The preview, then the hint, then page after page until the end.
        hints = HINT.findall(text)
        check(len(hints) == 1, f"exactly one hint (stdout): {hints}")
        uri, offset = hints[0][0], int(hints[0][1])
        check(uri.endswith("/stdout") and uri[len("artifact://"):][:64] == record["output"]["manifest"], uri)
        preview = text[len("[stdout]\n"):text.index("[Truncated.")]
        # The preview may end in a line cut by the byte limit; the hint re-reads that line.
        check(preview.count("\n") in (offset, offset + 1), "the hint offset counts complete preview lines")
        recovered = bytearray(b"".join(line.encode() + b"\n" for line in preview.split("\n")[:offset]))
        pages = 0
        while True:
            page = await session.call_tool("read", {"filePath": uri, "offset": offset})
            check(not page.is_error, f"read at {offset} failed: {page.content}")
            check(len(page.content) == 2, "a page and its continuation line")
            recovered += text_of(page, 0).encode()
            meta = page.structured_content
            check(meta["offset"] == offset and meta["lines"] <= 2000, f"page metadata {meta}")
            pages += 1
            continuation = text_of(page, 1)
            if meta["next_offset"] is None:
                check("end of artifact" in continuation, continuation)
                break
            nxt = HINT.findall(continuation)
            check(nxt == [(uri, str(meta["next_offset"]))], f"continuation {continuation}")
            offset = meta["next_offset"]
        check(pages >= 100, f"paged in {pages} pages")
        check(hashlib.sha256(recovered).hexdigest() == stdout["sha256"], "recovered byte for byte")

        # A byte read of the same stream, from the middle.
        mid = len(expected) // 2
        piece = await session.call_tool("read", {"filePath": uri, "byteOffset": mid, "byteLimit": 1000})
        check(not piece.is_error and text_of(piece).encode() == expected[mid:mid + 1000], "byte read")
        check("byteOffset=%d" % (mid + 1000) in text_of(piece, 1), text_of(piece, 1))

        # Resources: templates, the manifest, a stream.
        templates = (await session.list_resource_templates()).resource_templates
        check({t.uri_template for t in templates} == {"artifact://{digest}", "artifact://{digest}/{stream}"}, templates)
        manifest_uri = "artifact://" + record["output"]["manifest"]
        listed = (await session.list_resources()).resources
        check(any(str(r.uri) == manifest_uri for r in listed), f"recent run listed: {listed}")
        contents = (await session.read_resource(manifest_uri)).contents
        check(len(contents) == 1 and contents[0].mime_type == "application/json", contents)
        manifest = json.loads(contents[0].text)
        check([s["name"] for s in manifest["streams"]] == ["stdout", "stderr"], manifest)
        check(contents[0].meta["nextOffset"] is None, contents[0].meta)
        stream = (await session.read_resource(uri)).contents[0]
        check(stream.text.encode() == expected[: len(stream.text.encode())], "stream resource is the first page")
        check(stream.meta["totalLines"] == 300001 and stream.meta["nextOffset"] == 2000, stream.meta)

        # Bad arguments: each an error result with a message, and the server goes on.
        missing = "artifact://" + "0" * 64
        bad_reads = [
            ({"filePath": "/etc/passwd"}, "not an artifact URI"),
            ({"filePath": "file:///etc/passwd"}, "not an artifact URI"),
            ({"filePath": "artifact://" + "A" * 64}, "not a valid artifact URI"),
            ({"filePath": manifest_uri + "/"}, "trailing slash"),
            ({"filePath": manifest_uri + "?x=1"}, "query"),
            ({"filePath": manifest_uri + "/../x"}, "not a valid artifact URI"),
            ({"filePath": manifest_uri + "/nope"}, "declared: stdout, stderr"),
            ({"filePath": "artifact://" + stdout["sha256"] + "/stdout"}, "not a manifest"),
            ({"filePath": missing}, "not in this store"),
            ({"filePath": uri, "offset": 300002}, "past the end"),
            ({"filePath": uri, "offset": -1}, "integer of at least 0"),
            ({"filePath": uri, "offset": "ten"}, "integer of at least 0"),
            ({"filePath": uri, "limit": 0}, "from 1 to 2000"),
            ({"filePath": uri, "limit": 2001}, "from 1 to 2000"),
            ({"filePath": uri, "byteOffset": 0, "offset": 5}, "not both"),
            ({"filePath": uri, "byteLimit": 5}, "needs `byteOffset`"),
            ({"filePath": uri, "byteOffset": 0, "byteLimit": 3 << 20}, "from 1 to 2097152"),
            ({"filePath": uri, "byteOffset": len(expected) + 1}, "past the end"),
            ({"path": uri}, "has no argument `path`"),
            ({}, "needs the argument `filePath`"),
        ]
        for arguments, needle in bad_reads:
            result = await session.call_tool("read", arguments)
            check(result.is_error, f"read {arguments} should fail")
            check(needle in text_of(result), f"read {arguments}: {text_of(result)!r} lacks {needle!r}")
        bad_runs = [
            ({"command": []}, "non-empty array of strings"),
            ({"command": "ls -l"}, "non-empty array of strings"),
            ({"command": ["rm", "-rf", "/tmp/x"]}, "`rm` is not allowed"),
            ({"command": [PY, "-c", "1"], "timeout_seconds": 0}, "from 1 to 86400"),
            ({"command": [PY, "-c", "1"], "shell": True}, "has no argument `shell`"),
            ({"command": [PY, "-c", "1"], "cwd": "/nonexistent/dir"}, "working directory"),
        ]
        for arguments, needle in bad_runs:
            result = await session.call_tool("run", arguments)
            check(result.is_error, f"run {arguments} should fail")
            check(needle in text_of(result), f"run {arguments}: {text_of(result)!r} lacks {needle!r}")
        for bad in ["/etc/passwd", "artifact://xyz", manifest_uri + "/a/b"]:
            try:
                await session.read_resource(bad)
            except MCPError as e:
                check(e.error.code == -32602, f"resources/read {bad}: {e.error}")
            else:
                raise AssertionError(f"resources/read {bad} should fail")
        try:
            await session.read_resource(missing)
        except MCPError as e:
            check("not in this store" in e.error.message, e.error.message)
        else:
            raise AssertionError("resources/read of a missing artifact should fail")
        try:
            await session.call_tool("nope", {})
        except MCPError as e:
            check("unknown tool" in e.error.message, e.error.message)
        else:
            raise AssertionError("an unknown tool should be a protocol error")
        # A clean answer over the preview bound is retained and paged like any output.
        big_answer = "".join("answer line %d\n" % i for i in range(20000))
        writer = "import os, sys\nopen(os.environ['AGENTRUN_RESULT_SINK'], 'w').write(sys.stdin.read())"
        result = await session.call_tool("run", {"command": [PY, "-c", writer], "stdin": big_answer, "sink": True})
        text = text_of(result)
        check("[Clean answer (the program's result sink), over the preview bound:]" in text, text[-500:])
        answer_hint = HINT.findall(text[text.index("over the preview bound"):])
        check(len(answer_hint) == 1, f"the answer has its own hint: {answer_hint}")
        answer_uri, answer_offset = answer_hint[0][0], int(answer_hint[0][1])
        check(result.structured_content["result_artifact"] == answer_uri, result.structured_content["result_artifact"])
        rest = await session.call_tool("read", {"filePath": answer_uri, "offset": answer_offset, "limit": 2000})
        check(text_of(rest).startswith("answer line %d\n" % answer_offset), text_of(rest)[:100])

        # A timeout stops the program and says so; what it printed is kept.
        slow = "import time\nprint('before the timeout', flush=True)\ntime.sleep(600)"
        result = await session.call_tool("run", {"command": [PY, "-c", slow], "timeout_seconds": 1})
        text = text_of(result)
        check("before the timeout" in text and "[Timed out after 1s" in text, text)
        check(result.structured_content["outcome"] == "timed_out", result.structured_content["outcome"])

        final = await session.call_tool("run", {"command": [PY, "-c", "print('still here')"]})
        check("still here" in text_of(final), "the server survived the bad calls")

    await session_for(server(agentrun, store, PY), body)


def processes_with(marker):
    """Pids of live processes whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(pid))
    return found


async def cancel(agentrun, store):
    marker = "agentrun-cancel-%d-%d" % (os.getpid(), time.time_ns())
    # A parent that starts a grandchild, both sleeping far longer than the test.
    program = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]])\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )

    async def body(session):
        async def call():
            await session.call_tool("run", {"command": [PY, "-c", program, marker]})
            raise AssertionError("the call should have been cancelled")

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            # Cancel only once the parent and its grandchild both run.
            deadline = time.monotonic() + 30
            while len(processes_with(marker)) < 2:
                check(time.monotonic() < deadline, "the program did not start its grandchild")
                await anyio.sleep(0.05)
            group.cancel_scope.cancel()
        deadline = time.monotonic() + 20
        while processes_with(marker) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        left = processes_with(marker)
        check(not left, f"processes left behind after cancellation: {left}")
        # The server is still serving.
        result = await session.call_tool("run", {"command": [PY, "-c", "print('after cancel')"]})
        check("after cancel" in text_of(result), text_of(result))

    # Before the call, make sure the marker matches nothing (no false pass).
    check(not processes_with(marker), "marker already in use")
    await session_for(server(agentrun, store, PY), body)


async def concurrent(agentrun, store):
    program = (
        "import os, sys\n"
        "n = int(sys.argv[1])\n"
        "for i in range(3000 + n):\n"
        "    print('call %d line %d' % (n, i))\n"
        "print('err %d' % n, file=sys.stderr)\n"
        "open(os.environ['AGENTRUN_RESULT_SINK'], 'w').write('answer %d' % n)\n"
    )
    results = {}

    async def body(session):
        async def one(n):
            results[n] = await session.call_tool(
                "run", {"command": [PY, "-c", program, str(n)], "sink": True}
            )

        async with anyio.create_task_group() as group:
            for n in range(32):
                group.start_soon(one, n)

    await session_for(server(agentrun, store, PY), body)
    check(len(results) == 32, f"{len(results)} results")
    digests = set()
    for n, result in results.items():
        text = text_of(result)
        check(not result.is_error, f"call {n}: {text[:300]}")
        check(text.startswith("[stdout]\ncall %d line 0\n" % n), f"call {n} got {text[:60]!r}")
        check("[stderr]\nerr %d\n" % n in text, f"call {n} stderr")
        check("answer %d\n" % n in text, f"call {n} answer")
        structured = result.structured_content
        check(structured["result"] == "answer %d" % n, f"call {n} clean answer {structured['result']}")
        stdout = structured["record"]["output"]["streams"][0]
        check(stdout["lines"] == 3000 + n, f"call {n} has its own stdout: {stdout['lines']}")
        hint = HINT.findall(text)
        check(len(hint) == 1 and hint[0][1] == "2000", f"call {n} hint {hint}")
        digests.add(stdout["sha256"])
    check(len(digests) == 32, "32 distinct outputs")


async def progress(agentrun, store):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async def body(session):
        result = await session.call_tool(
            "run",
            {"command": [PY, "-c", "import time\nfor i in range(5):\n print(i, flush=True); time.sleep(0.7)"], "timeout_seconds": 60},
            progress_callback=on_progress,
        )
        check(not result.is_error, text_of(result))

    await session_for(server(agentrun, store, PY), body)
    check(len(seen) >= 2, f"progress notifications: {seen}")
    check(all(total == 60 for _, total, _ in seen), f"total is the timeout: {seen}")
    check(all(b > a for (a, _, _), (b, _, _) in zip(seen, seen[1:])), f"progress increases: {seen}")
    check(all("stdout so far" in m for _, _, m in seen), f"messages: {seen}")


def robustness(agentrun, store):
    """Raw JSON-RPC on the server's stdin: bad input gets protocol errors and it keeps serving."""
    proc = subprocess.Popen(
        [agentrun, "--store", store, "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )

    def send(line):
        proc.stdin.write(line if isinstance(line, bytes) else line.encode())
        proc.stdin.write(b"\n")
        proc.stdin.flush()

    def receive():
        line = proc.stdout.readline()
        check(line, "the server closed its output")
        return json.loads(line)

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}))
        check(receive()["id"] == 1, "initialize answered")
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

        send("{this is not json")
        reply = receive()
        check(reply["error"]["code"] == -32700, f"parse error: {reply}")
        send(b"\xff\xfe not utf-8")
        check(receive()["error"]["code"] == -32700, "invalid UTF-8 is a parse error")
        send(json.dumps({"jsonrpc": "2.0", "id": 2}))
        reply = receive()
        check(reply["error"]["code"] == -32600 and reply.get("id") == 2, f"invalid request: {reply}")
        send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "no/such/method", "params": {}}))
        reply = receive()
        check(reply["error"]["code"] == -32601 and reply["id"] == 3, f"unknown method: {reply}")
        send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 5}}))
        reply = receive()
        check("error" in reply and reply.get("id") == 4, f"malformed params: {reply}")
        big = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "read", "arguments": {"filePath": "x" * (5 << 20)}}})
        send(big)
        reply = receive()
        check(reply["error"]["code"] == -32600 and "larger than" in reply["error"]["message"], f"oversized: {reply['error']}")
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/bogus", "params": 1}))
        send(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "ping"}))
        reply = receive()
        check(reply == {"jsonrpc": "2.0", "id": 6, "result": {}}, f"alive after all that: {reply}")
        send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}))
        check(len(receive()["result"]["tools"]) == 5, "tools/list after the bad input (run, read, agent, compact, fanout)")
    finally:
        proc.stdin.close()
        code = proc.wait(timeout=30)
    check(code == 0, f"exit code {code} after the client closed stdin")


async def agent(agentrun, store):
    """The `agent` tool runs the real Claude Code (on PATH, pointed at a scripted model server
    by the environment this client inherited) and answers with its final message."""

    async def body(session):
        tools = {t.name for t in (await session.list_tools()).tools}
        check(tools == {"run", "read", "agent", "compact", "fanout"}, f"tools: {tools}")
        refused = await session.call_tool("agent", {"harness": "codex", "prompt": "hi"})
        check(refused.is_error and "`codex` is not allowed" in text_of(refused), text_of(refused))
        unknown = await session.call_tool("agent", {"harness": "nope", "prompt": "hi"})
        check(unknown.is_error and "nope" in text_of(unknown), text_of(unknown))
        result = await session.call_tool("agent", {"harness": "claude", "prompt": "say the answer", "timeout_seconds": 120})
        text = text_of(result)
        check(not result.is_error, text)
        check(text.startswith("[Agent claude succeeded"), text)
        check("[Final message, verbatim:]\nthe delegated answer\n" in text, repr(text))
        check("[Models: claude-scripted-model" in text, repr(text))
        hints = [line for line in text.splitlines() if line.startswith("[stdout retained")]
        check(len(hints) == 1 and 'read(filePath="artifact://' in hints[0], text)
        uri = hints[0].split('read(filePath="', 1)[1].split('"', 1)[0]
        stream = await session.call_tool("read", {"filePath": uri})
        check('"type":"result"' in text_of(stream), "the retained stream holds the result event")

    await session_for(server(agentrun, store, "claude"), body)


async def compact(agentrun, store):
    """The `compact` tool: a summarizer program that refuses the whole history as too long and
    summarizes the pruned retry; the result gives the summary and read hints that read back
    every retained tool output byte for byte."""
    log = "error[E0425]: cannot find value `fixture` in this scope\n" * 400
    transcript = {
        "messages": [
            {"role": "user", "content": "Why does cargo build fail?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "cargo build"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": log},
            ]},
            {"role": "assistant", "content": "The fixture module is missing; I added it."},
        ],
        "recent_start": 3,
    }
    path = os.path.join(os.path.dirname(store), "transcript.json")
    with open(path, "w") as f:
        json.dump(transcript, f)
    before = open(path, "rb").read()
    summarizer = (
        "import sys\n"
        "text = sys.stdin.read()\n"
        "if len(text) > 8000:\n"
        "    print('agentrun:context-length-exceeded', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        "print('SUMMARY: the fixture module was missing and was added.')\n"
    )

    async def body(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        check("compact" in tools, f"tools: {sorted(tools)}")
        refused = await session.call_tool("compact", {"transcriptPath": path, "summarizer": ["llm"]})
        check(refused.is_error and "`llm` is not allowed" in text_of(refused), text_of(refused))
        neither = await session.call_tool("compact", {"transcriptPath": path})
        check(neither.is_error and "exactly one summarizer" in text_of(neither), text_of(neither))
        missing = await session.call_tool("compact", {"transcriptPath": path + ".missing", "summarizer": [PY, "-c", summarizer]})
        check(missing.is_error and "cannot read" in text_of(missing), text_of(missing))

        result = await session.call_tool("compact", {"transcriptPath": path, "summarizer": [PY, "-c", summarizer]})
        text = text_of(result)
        check(not result.is_error, text)
        check(text.startswith("[Compaction succeeded]"), text)
        check("SUMMARY: the fixture module was missing and was added." in text, text)
        check("[first attempt:" in text and "[retry attempt:" in text, text)
        hints = HINT.findall(text)
        check(len(hints) == 1 and hints[0][1] == "0", f"one read hint: {hints}")
        page = await session.call_tool("read", {"filePath": hints[0][0]})
        check(text_of(page, 0) == log, "the hint reads back the tool output byte for byte")
        data = result.structured_content
        check(data["retried"] and data["retry_reason"] == "context length exceeded", f"{data}")
        check(data["references"][0]["read"] == {"filePath": hints[0][0], "offset": 0}, f"{data['references']}")
        check(data["retained"]["kept"] == [hints[0][0]], f"{data['retained']}")
        links = [b for b in result.content if getattr(b, "type", None) == "resource_link"]
        check([str(l.uri) for l in links] == [hints[0][0]], f"one resource link per kept artifact: {links}")
        linked = await session.read_resource(links[0].uri)
        check(linked.contents[0].text == log, "the resource link reads back the tool output")
        check(open(path, "rb").read() == before, "the transcript is unchanged")

        # A summarizer failure that is not about size: an error result with the attempts.
        failing = await session.call_tool("compact", {"transcriptPath": path, "summarizer": [PY, "-c", "import sys; sys.exit(3)"]})
        check(failing.is_error and text_of(failing).startswith("[Compaction failed:"), text_of(failing))
        check(len(failing.structured_content["attempts"]) == 1, f"{failing.structured_content}")

    await session_for(server(agentrun, store, PY), body)


async def store_resources(agentrun, store):
    """resources/list pages over every run of the store, those of earlier server processes
    included, newest first; a bogus cursor is -32602; each run is followed by list_changed."""
    first_uris = []

    async def earlier(session):
        for i in range(57):
            result = await session.call_tool("run", {"command": ["printf", "earlier %d" % i]})
            check(not result.is_error, text_of(result))
            first_uris.append(result.structured_content["artifacts"]["manifest"])

    await session_for(server(agentrun, store, "printf"), earlier)

    changed = []

    async def handler(message):
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/resources/list_changed":
            changed.append(inner)

    params = server(agentrun, store, "printf")
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=handler) as session:
            await session.initialize()
            later = []
            for i in range(2):
                result = await session.call_tool("run", {"command": ["printf", "later %d" % i]})
                later.append(result.structured_content["artifacts"]["manifest"])
            with anyio.fail_after(60):
                while len(changed) < 2:
                    await anyio.sleep(0.05)
            listed, cursor, pages = [], None, 0
            while True:
                page = await session.list_resources(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                pages += 1
                listed += [str(r.uri) for r in page.resources]
                cursor = page.next_cursor
                if not cursor:
                    break
                check(pages < 10, "the cursor never ends")
            check(pages == 2, f"59 runs in pages of 50: {pages} pages")
            expected = list(reversed(first_uris + later))
            check(listed == expected, f"newest first, every run once:\n{listed}\n{expected}")
            for bogus in ["nonsense", "runs1-zz", "runs1-2f2e2e"]:
                try:
                    await session.list_resources(params=PaginatedRequestParams(cursor=bogus))
                    check(False, f"cursor {bogus} accepted")
                except MCPError as e:
                    check(e.error.code == -32602, f"cursor {bogus}: {e.error}")


async def structured(agentrun, store):
    """With --structured-content every tool declares an outputSchema and every result, error
    results included, validates against it (the SDK checks each call); run results carry a
    resource_link per artifact that resources/read resolves. Without the flag no tool
    declares one."""

    async def body(session):
        tools = (await session.list_tools()).tools
        check({t.name for t in tools} >= {"run", "read", "agent", "compact"}, tools)
        for tool in tools:
            check(tool.output_schema is not None and tool.output_schema.get("type") == "object", tool)
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        result = await session.call_tool("run", {"command": ["printf", "hello\nworld\n"]})
        check(not result.is_error, result)
        check(result.structured_content["status"] is not None, result.structured_content)
        links = [c for c in result.content if c.type == "resource_link"]
        check(len(links) == 3, f"manifest, stdout, stderr: {links}")
        artifacts = result.structured_content["artifacts"]
        check([str(l.uri) for l in links] == [artifacts["manifest"], artifacts["stdout"], artifacts["stderr"]], links)
        for link in links:
            check(link.name and link.mime_type and link.size is not None, link)
            contents = (await session.read_resource(link.uri)).contents
            check(len(contents) == 1, contents)
            check(len(contents[0].text.encode()) == link.size, f"{link}: {contents[0].text!r}")
        stdout = (await session.read_resource(links[1].uri)).contents[0].text
        check(stdout == "hello\nworld\n", stdout)
        page = await session.call_tool("read", {"filePath": artifacts["stdout"]})
        check(not page.is_error and page.structured_content["total_lines"] == 2, page)
        # Error results carry structured content too, and validate.
        refused = await session.call_tool("run", {"command": ["ls"]})
        check(refused.is_error and "not allowed" in refused.structured_content["error"], refused)
        bad = await session.call_tool("read", {"filePath": "/etc/passwd"})
        check(bad.is_error and bad.structured_content["error"], bad)
        compact = await session.call_tool("compact", {})
        check(compact.is_error and compact.structured_content["error"], compact)

    await session_for(server(agentrun, store, "printf"), body)

    async def plain(session):
        tools = (await session.list_tools()).tools
        check(all(t.output_schema is None for t in tools), tools)
        result = await session.call_tool("run", {"command": ["printf", "x"]})
        check(result.structured_content is None, result)
        check(sum(c.type == "resource_link" for c in result.content) == 3, result.content)

    params = StdioServerParameters(
        command=agentrun, args=["--store", store, "mcp", "--allow", "printf"], env=dict(os.environ)
    )
    await session_for(params, plain)


RELATED_TASK = "io.modelcontextprotocol/related-task"


async def task_request(session, request, result_type):
    """A tasks/* request with the SDK's own 2025-11-25 types (the SDK has no task methods of its
    own, and validates none of these answers itself: `result_type` does)."""
    return await session.send_request(request, result_type)


async def call_as_task(session, name, arguments, ttl, progress_token):
    """A task-augmented tools/call, built with the SDK's types. The SDK's typed path validates a
    tools/call answer as a CallToolResult only, so the request goes through the session's
    JSON-RPC dispatcher and the answer is validated as the CreateTaskResult it must be."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=name,
            arguments=arguments,
            task=types.TaskMetadata(ttl=ttl),
            _meta={"progressToken": progress_token},
        )
    )
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    raw = await session._dispatcher.send_raw_request(data["method"], data["params"], {})
    return types.CreateTaskResult.model_validate(raw)


async def wait_for_status(session, task_id, deadline_seconds=120):
    deadline = time.monotonic() + deadline_seconds
    while True:
        task = await task_request(
            session, types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
        )
        if task.status != "working":
            return task
        check(time.monotonic() < deadline, f"task {task_id} still working: {task}")
        await anyio.sleep(min(task.poll_interval or 1000, 200) / 1000)


async def expect_error(code, what, call):
    try:
        await call()
    except MCPError as e:
        check(e.error.code == code, f"{what}: {e.error}")
        return e.error
    raise AssertionError(f"{what}: no error")


async def tasks_body(session, progress, statuses, workdir):
    caps = session.initialize_result.capabilities.tasks
    check(caps is not None and caps.list is not None and caps.cancel is not None, f"tasks capability: {caps}")
    check(caps.requests.tools.call is not None, f"task-augmented tools/call: {caps}")
    tools = {t.name: t for t in (await session.list_tools()).tools}
    for name in ["run", "agent", "compact", "fanout"]:
        check(tools[name].execution and tools[name].execution.task_support == "optional", tools[name])
    check(tools["read"].execution is None, tools["read"])

    # A run that prints, then waits for the test to let it finish.
    go = os.path.join(workdir, "go")
    program = (
        "import os, sys, time\n"
        "for i in range(3000):\n"
        "    print('line %d' % i)\n"
        "sys.stdout.flush()\n"
        "while not os.path.exists(sys.argv[1]):\n"
        "    time.sleep(0.05)\n"
        "print('finished')\n"
    )
    created = await call_as_task(session, "run", {"command": [PY, "-c", program, go]}, 90_000, "task-progress-1")
    task_id = created.task.task_id
    check(created.task.status == "working", created)
    check(created.task.ttl == 90_000 and created.task.poll_interval, created)
    check(created.task.created_at.endswith("Z") and created.task.last_updated_at, created)

    # Progress keeps flowing, under the token of the original request, tied to the task.
    # (Once one says the 3000 lines were seen, so does the task's status message.)
    mine = lambda: [p for p in progress if p.progress_token == "task-progress-1"]
    with anyio.fail_after(120):
        while not any("3000 lines" in (p.message or "") for p in mine()):
            await anyio.sleep(0.05)
    first = mine()[0]
    check(first.meta and first.meta[RELATED_TASK]["taskId"] == task_id, f"progress meta: {first}")
    working = await task_request(
        session, types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
    )
    check(working.status == "working" and working.task_id == task_id, working)
    check("3000 lines" in (working.status_message or ""), f"the status message is the progress: {working}")
    open(go, "w").close()

    done = await wait_for_status(session, task_id)
    check(done.status == "completed", done)
    result = await task_request(
        session, types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)), types.CallToolResult
    )
    text = text_of(result)
    check(not result.is_error and text.startswith("[stdout]\nline 0\n"), text[:200])
    check(result.meta[RELATED_TASK]["taskId"] == task_id, result.meta)
    # The read hints of a task's result page the rest, as for a direct call.
    uri, offset = HINT.findall(text)[0]
    page = text_of(await session.call_tool("read", {"filePath": uri, "offset": int(offset)}))
    check(page.startswith("line %s\n" % offset), page[:100])
    check("line 2999\nfinished\n" in page, f"the rest of the run's output: {page[-200:]!r}")
    with anyio.fail_after(60):
        while not any(s.task_id == task_id and s.status == "completed" for s in statuses):
            await anyio.sleep(0.05)

    listed = await task_request(session, types.ListTasksRequest(), types.ListTasksResult)
    check([t.task_id for t in listed.tasks] == [task_id], listed)
    check(listed.tasks[0].status == "completed", listed)

    # tasks/cancel on a long run stops its process group: the program and its grandchild.
    marker = "agentrun-task-cancel-%d-%d" % (os.getpid(), time.time_ns())
    check(not processes_with(marker), "marker already in use")
    long = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]])\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )
    slow = (await call_as_task(session, "run", {"command": [PY, "-c", long, marker]}, 90_000, "task-progress-2")).task
    deadline = time.monotonic() + 60
    while len(processes_with(marker)) < 2:
        check(time.monotonic() < deadline, "the program did not start its grandchild")
        await anyio.sleep(0.05)
    cancelled = await task_request(
        session, types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=slow.task_id)), types.CancelTaskResult
    )
    check(cancelled.status == "cancelled" and cancelled.task_id == slow.task_id, cancelled)
    deadline = time.monotonic() + 30
    while processes_with(marker) and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    left = processes_with(marker)
    check(not left, f"processes left behind after tasks/cancel: {left}")
    again = await task_request(
        session, types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=slow.task_id)), types.GetTaskResult
    )
    check(again.status == "cancelled", again)
    stopped = await task_request(
        session, types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=slow.task_id)), types.CallToolResult
    )
    check("started" in text_of(stopped), f"the stopped run's output: {text_of(stopped)[:300]}")
    await expect_error(-32602, "a second cancel", lambda: task_request(
        session, types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=slow.task_id)), types.CancelTaskResult
    ))
    with anyio.fail_after(60):
        while not any(s.task_id == slow.task_id and s.status == "cancelled" for s in statuses):
            await anyio.sleep(0.05)
    listed = await task_request(session, types.ListTasksRequest(), types.ListTasksResult)
    check([t.task_id for t in listed.tasks] == [slow.task_id, task_id], f"newest first: {listed}")

    # A bogus task id or cursor is -32602.
    bogus = "no-such-task"
    await expect_error(-32602, "tasks/get of a bogus id", lambda: task_request(
        session, types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=bogus)), types.GetTaskResult))
    await expect_error(-32602, "tasks/result of a bogus id", lambda: task_request(
        session, types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=bogus)), types.CallToolResult))
    await expect_error(-32602, "tasks/cancel of a bogus id", lambda: task_request(
        session, types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=bogus)), types.CancelTaskResult))
    await expect_error(-32602, "tasks/list with a bogus cursor", lambda: task_request(
        session, types.ListTasksRequest(params=PaginatedRequestParams(cursor="bogus")), types.ListTasksResult))

    # The server goes on serving plain calls.
    result = await session.call_tool("run", {"command": [PY, "-c", "print('after tasks')"]})
    check("after tasks" in text_of(result), text_of(result))


def task_observers():
    progress, statuses = [], []

    async def handler(message):
        inner = getattr(message, "root", message)
        if isinstance(inner, types.ProgressNotification):
            progress.append(inner.params)

    async def status(params):
        statuses.append(params)

    binding = NotificationBinding(
        method="notifications/tasks/status", params_type=types.TaskStatusNotificationParams, handler=status
    )
    return progress, statuses, handler, binding


async def tasks(agentrun, store, url=None):
    """Tasks (protocol 2025-11-25): a run as a task is polled to its result, progress keeps
    flowing, tasks/list shows it, tasks/cancel stops a long run's processes, a bogus id is an
    error; over stdio, or over Streamable HTTP at `url`."""
    progress, statuses, handler, binding = task_observers()
    workdir = os.path.dirname(store)
    if url is None:
        async with stdio_client(server(agentrun, store, PY)) as (read, write):
            async with ClientSession(read, write, message_handler=handler, notification_bindings=[binding]) as session:
                await session.initialize()
                await tasks_body(session, progress, statuses, workdir)
    else:
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write, message_handler=handler, notification_bindings=[binding]) as session:
                await session.initialize()
                await tasks_body(session, progress, statuses, workdir)


SCENARIOS = {
    "tasks": tasks,
    "agent": agent,
    "structured": structured,
    "store_resources": store_resources,
    "compact": compact,
    "conformance": conformance,
    "cancel": cancel,
    "concurrent": concurrent,
    "progress": progress,
}


def main():
    scenario, agentrun, store = sys.argv[1:4]
    extra = sys.argv[4:]
    if scenario == "robustness":
        robustness(agentrun, store)
    else:
        anyio.run(SCENARIOS[scenario], agentrun, store, *extra)
    print(f"{scenario}: ok")


if __name__ == "__main__":
    main()
