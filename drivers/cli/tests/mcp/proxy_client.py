"""Drives `agentrun mcp proxy` with the official MCP Python SDK, one scenario per invocation.

Usage: proxy_client.py SCENARIO AGENTRUN STORE NODE FILESYSTEM_SERVER DIR

FILESYSTEM_SERVER is the official filesystem server's dist/index.js (run with NODE, allowed
to touch DIR). Each scenario exits non-zero with a message on the first failure; the Rust
tests in tests/mcp_proxy.rs run one scenario each.
"""

import json
import os
import re
import subprocess
import sys
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HINT = re.compile(r'read\(filePath="(artifact://[0-9a-f]{64}(?:/[A-Za-z0-9._-]+)?)", offset=(\d+)\)')
PY = sys.executable


def check(condition, message):
    if not condition:
        raise AssertionError(message)


async def session_for(params, body):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await body(session)


def proxied(agentrun, store, server, *limits):
    args = ["--store", store, "mcp", "proxy", *limits, "--", *server]
    return StdioServerParameters(command=agentrun, args=args, env=dict(os.environ))


ANY_HINT = re.compile(r'read\(filePath="(artifact://[^"]+)", (offset|byteOffset)=(\d+)\)')


async def read_all(session, uri, kind, at):
    """An artifact from `at` on, following every continuation (line or byte) to its end."""
    text = ""
    while True:
        page = await session.call_tool("read", {"filePath": uri, kind: at})
        check(not page.is_error, f"read {uri} at {kind}={at} failed: {page.content}")
        text += page.content[0].text
        continuation = page.content[1].text
        nxt = ANY_HINT.findall(continuation)
        if not nxt:
            check("end of artifact" in continuation, continuation)
            return text
        check(nxt[0][0] == uri, continuation)
        kind, at = nxt[0][1], int(nxt[0][2])


async def big(agentrun, store, node, fs, root):
    # 3 MB of lines of varying length, UTF-8 among them, no final newline.
    lines = ["%07d %s é" % (i, "y" * (i % 97)) for i in range(56000)]
    expected = "\n".join(lines)
    check(len(expected.encode()) > 3_000_000, "a 3 MB file")
    path = os.path.join(root, "big.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(expected)

    async def body(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        check("read" in tools and "read_text_file" in tools, sorted(tools))
        read_text = tools["read_text_file"]
        check(read_text.output_schema is None, "a proxied tool declares no outputSchema")
        check("declares no output schema" in read_text.description, read_text.description)

        result = await session.call_tool("read_text_file", {"path": path})
        check(not result.is_error, f"the call failed: {result.content}")
        check(result.structured_content is None, "a bounded result has no structured content")
        check(len(result.content) == 1, f"one preview item: {len(result.content)}")
        text = result.content[0].text
        check(len(text.encode()) <= 1_048_576, f"the preview is bounded: {len(text.encode())} bytes")
        hints = HINT.findall(text)
        check(hints, f"read hints in the preview: {text[-500:]}")
        uri, offset = hints[0][0], int(hints[0][1])
        check(uri.endswith("/text-1"), f"the first hint names the first text item's stream: {uri}")

        # The preview's complete lines, then page after page until the end.
        preview = text[text.index("[text-1]\n") + len("[text-1]\n"):text.index("[Truncated.")]
        recovered = "".join(line + "\n" for line in preview.split("\n")[:offset])
        pages = 0
        while True:
            page = await session.call_tool("read", {"filePath": uri, "offset": offset})
            check(not page.is_error, f"read at {offset} failed: {page.content}")
            recovered += page.content[0].text
            pages += 1
            continuation = page.content[1].text
            nxt = HINT.findall(continuation)
            if not nxt:
                check("end of artifact" in continuation, continuation)
                break
            check(nxt[0][0] == uri, continuation)
            offset = int(nxt[0][1])
        check(pages >= 20, f"paged in {pages} pages")
        check(recovered == expected, "the hints page back the exact bytes")

        # The structured content was retained as JSON beside the text.
        check(len(hints) == 2 and "[Structured content:" in text, f"the structured content's hint: {hints}")
        structured = await read_all(session, hints[1][0], "offset", 0)
        check(json.loads(structured) == {"content": expected}, "the structured content, as JSON")

    await session_for(proxied(agentrun, store, [node, fs, root]), body)


def raw_exchange(command, requests):
    """The answer lines `command` writes for `requests` (JSON-RPC objects, one answer each),
    exactly as written."""
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    answers = []
    for request in requests:
        child.stdin.write((json.dumps(request) + "\n").encode())
        child.stdin.flush()
        if "id" not in request:
            continue
        while True:
            line = child.stdout.readline()
            check(line, f"{command[0]} ended before answering {request}")
            if json.loads(line).get("id") == request["id"]:
                answers.append(line)
                break
    child.stdin.close()
    child.wait(timeout=30)
    return answers


def small(agentrun, store, node, fs, root):
    path = os.path.join(root, "small.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("a small file\nwith two lines, one é\n")
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "read_text_file", "arguments": {"path": path}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "list_directory", "arguments": {"path": root}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "read_text_file", "arguments": {"path": "/nonexistent/outside"}}},
    ]
    direct = raw_exchange([node, fs, root], requests)
    through = raw_exchange([agentrun, "--store", store, "mcp", "proxy", "--", node, fs, root], requests)
    # initialize is adjusted (capabilities, instructions); every tool result is not.
    for d, t in zip(direct[1:], through[1:]):
        check(d == t, f"a small result passes byte for byte:\n{d!r}\n{t!r}")
    check(b"a small file" in direct[1], direct[1])
    check(b'"isError":true' in direct[3], f"the error result is compared too: {direct[3]!r}")
    caps = json.loads(through[0])["result"]["capabilities"]
    check("tools" in caps and "resources" in caps, caps)


SLOW_SERVER = r'''
import sys, anyio
from mcp.server.mcpserver import MCPServer

marker = sys.argv[1]
mcp = MCPServer("slow")

@mcp.tool()
async def slow() -> str:
    """Sleeps until cancelled."""
    open(marker + ".started", "w").close()
    try:
        await anyio.sleep(600)
    except BaseException:
        open(marker + ".cancelled", "w").close()
        raise
    return "slept"

@mcp.tool()
def hello() -> str:
    """Says hello."""
    return "hello"

mcp.run()
'''


async def cancel(agentrun, store, node, fs, root):
    marker = os.path.join(root, "slow")
    script = os.path.join(root, "slow_server.py")
    with open(script, "w") as f:
        f.write(SLOW_SERVER)

    async def body(session):
        async def call():
            await session.call_tool("slow", {})
            raise AssertionError("the call should have been cancelled")

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            deadline = time.monotonic() + 60
            while not os.path.exists(marker + ".started"):
                check(time.monotonic() < deadline, "the proxied tool did not start")
                await anyio.sleep(0.05)
            group.cancel_scope.cancel()
        deadline = time.monotonic() + 30
        while not os.path.exists(marker + ".cancelled"):
            check(time.monotonic() < deadline, "the cancellation did not reach the child's tool")
            await anyio.sleep(0.05)
        # The proxy and the child go on serving.
        result = await session.call_tool("hello", {})
        check(result.content[0].text == "hello", result.content)

    await session_for(proxied(agentrun, store, [PY, script, marker]), body)


def lifetime(agentrun, store, node, fs, root):
    # The child exits at once: the proxy ends with its status.
    # (The client's side stays open, so only the child's exit can end it.)
    ended = subprocess.Popen(
        [agentrun, "--store", store, "mcp", "proxy", "--", PY, "-c", "import sys; sys.exit(7)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    code = ended.wait(timeout=60)
    ended.stdin.close()
    check(code == 7, f"the child's status: {code}")
    # The client hangs up: the child is stopped too.
    pidfile = os.path.join(root, "child.pid")
    child = ("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
             "sys.stdin.read()\ntime.sleep(600)\n")
    proxy = subprocess.Popen(
        [agentrun, "--store", store, "mcp", "proxy", "--", PY, "-c", child, pidfile],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not (os.path.exists(pidfile) and open(pidfile).read()):
        check(time.monotonic() < deadline, "the child did not start")
        time.sleep(0.05)
    pid = int(open(pidfile).read())
    proxy.stdin.close()
    check(proxy.wait(timeout=60) == 0, "the proxy ends when the client hangs up")
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        check(time.monotonic() < deadline, "the child outlived the proxy")
        time.sleep(0.05)


SCENARIOS = {"big": big, "cancel": cancel}


def main():
    scenario, agentrun, store, node, fs, root = sys.argv[1:7]
    if scenario == "small":
        small(agentrun, store, node, fs, root)
    elif scenario == "lifetime":
        lifetime(agentrun, store, node, fs, root)
    else:
        anyio.run(SCENARIOS[scenario], agentrun, store, node, fs, root)
    print(f"{scenario}: ok")


if __name__ == "__main__":
    main()
