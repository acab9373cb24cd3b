"""A deep `read` over Streamable HTTP (`agentrun mcp --http`) beside the same `read` over
stdio (see scripts/bench-mcp-http.sh).

Usage: bench_mcp_http.py AGENTRUN WORKDIR

A `run` through a stdio server makes an artifact of BENCH_MCP_BYTES (default 1 GiB) of
100-byte lines; then one stdio server and one HTTP server on the same store each answer
`read` of the artifact's last 2000-line page (200 KB). Two clients per transport: the
official MCP Python SDK (what a client sees, its own overhead included) and bare JSON-RPC
(newline-delimited on the pipes; one kept-alive HTTP/1.1 connection with the session id),
which leaves little but the server and the transport. Each round takes the median of READS
calls per client and transport, alternating, so that a busy spell of the machine hits all
alike; the table gives the median of the round medians and the fastest call of all.
"""

import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from bench_mcp import GENERATE, LINE, PY  # the same artifact as the page reads there

SIZE = int(os.environ.get("BENCH_MCP_BYTES", 1 << 30))
READS = int(os.environ.get("BENCH_MCP_READS", 100))
ROUNDS = int(os.environ.get("BENCH_MCP_ROUNDS", 3))
PAGE = 2000 * LINE

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def read_call(n, uri, offset):
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "read", "arguments": {"filePath": uri, "offset": offset}}}


def check_page(result):
    text = result["content"][0]["text"]
    assert not result.get("isError") and len(text) == PAGE, str(result)[:300]


class RawStdio:
    """`agentrun mcp` on its pipes, one JSON-RPC message a line."""

    def __init__(self, agentrun, store):
        self.child = subprocess.Popen([agentrun, "--store", store, "mcp"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.call(INITIALIZE)
        self.send(INITIALIZED)

    def send(self, message):
        self.child.stdin.write((json.dumps(message) + "\n").encode())
        self.child.stdin.flush()

    def call(self, message):
        self.send(message)
        while True:
            line = self.child.stdout.readline()
            assert line, "the stdio server ended"
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer["result"]

    def close(self):
        self.child.stdin.close()
        self.child.wait(timeout=30)


class RawHttp:
    """One kept-alive HTTP/1.1 connection to `/mcp` with the session's id; answers come as
    JSON or as an SSE stream, whichever the server picks."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port)
        self.host = f"127.0.0.1:{port}"
        self.session = None
        self.call(INITIALIZE)
        self.post(INITIALIZED)

    def post(self, message):
        headers = {"Host": self.host, "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-06-18"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        self.connection.request("POST", "/mcp", json.dumps(message), headers)
        response = self.connection.getresponse()
        body = response.read()
        assert response.status in (200, 202), (response.status, body[:300])
        self.session = response.getheader("Mcp-Session-Id") or self.session
        return response.getheader("Content-Type") or "", body

    def call(self, message):
        kind, body = self.post(message)
        if kind.startswith("text/event-stream"):
            for event in body.split(b"\n\n"):
                data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n")
                                  if line.startswith(b"data:"))
                if data:
                    answer = json.loads(data)
                    if answer.get("id") == message["id"]:
                        return answer["result"]
            raise AssertionError(f"no answer in the event stream: {body[:300]!r}")
        return json.loads(body)["result"]


def start_http(agentrun, store):
    """`agentrun mcp --http 127.0.0.1:0` and its port, from its start line."""
    child = subprocess.Popen([agentrun, "--store", store, "mcp", "--http", "127.0.0.1:0"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    line = child.stderr.readline().decode()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
    assert found, f"no URL in the start line: {line!r}"
    # Drain the rest of stderr so that the server never blocks on it.
    threading.Thread(target=child.stderr.read, daemon=True).start()
    return child, int(found.group(1))


async def make_artifact(agentrun, store):
    params = StdioServerParameters(command=agentrun, args=["--store", store, "mcp", "--allow", PY],
                                   env=dict(os.environ))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            t0 = time.monotonic()
            run = await s.call_tool(
                "run", {"command": [PY, "-c", GENERATE, str(SIZE), str(LINE)], "timeout_seconds": 3600})
            elapsed = time.monotonic() - t0
            text = run.content[0].text
            uri = text.split('read(filePath="', 1)[1].split('"', 1)[0]
    lines = ((-(-SIZE // LINE) + 9999) // 10000) * 10000
    return uri, lines, elapsed


async def timed_sdk(session, uri, offset):
    times = []
    for _ in range(READS):
        t = time.perf_counter()
        page = await session.call_tool("read", {"filePath": uri, "offset": offset})
        times.append(time.perf_counter() - t)
        assert not page.is_error and len(page.content[0].text) == PAGE, page.content[0].text[:300]
    return times


def timed_raw(client, uri, offset, first_id):
    times = []
    for i in range(READS):
        t = time.perf_counter()
        result = client.call(read_call(first_id + i, uri, offset))
        times.append(time.perf_counter() - t)
        check_page(result)
    return times


async def main(agentrun, work):
    store = os.path.join(work, "store")
    uri, lines, capture_s = await make_artifact(agentrun, store)
    offset = lines - 2000
    print(f"{SIZE / 2**20:.0f} MiB artifact, {lines} lines of {LINE} bytes, captured in "
          f"{capture_s:.1f} s; `read` at offset {offset} (the last page, {PAGE} bytes), "
          f"{ROUNDS} rounds of {READS} calls per row")

    http_server, port = start_http(agentrun, store)
    rows = {name: [] for name in (
        "SDK client, stdio", "SDK client, Streamable HTTP",
        "bare JSON-RPC, stdio", "bare JSON-RPC, Streamable HTTP")}
    try:
        stdio_params = StdioServerParameters(command=agentrun, args=["--store", store, "mcp"],
                                             env=dict(os.environ))
        async with stdio_client(stdio_params) as (r, w), \
                ClientSession(r, w) as over_stdio, \
                streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (hr, hw), \
                ClientSession(hr, hw) as over_http:
            await over_stdio.initialize()
            await over_http.initialize()
            raw_stdio, raw_http = RawStdio(agentrun, store), RawHttp(port)
            # Warm up every path (page cache, connections) before measuring.
            for client in (raw_stdio, raw_http):
                timed_raw(client, uri, offset, 1_000_000)
            await timed_sdk(over_stdio, uri, offset)
            await timed_sdk(over_http, uri, offset)
            for n in range(ROUNDS):
                rows["SDK client, stdio"].append(await timed_sdk(over_stdio, uri, offset))
                rows["SDK client, Streamable HTTP"].append(await timed_sdk(over_http, uri, offset))
                rows["bare JSON-RPC, stdio"].append(timed_raw(raw_stdio, uri, offset, (n + 1) * 10_000))
                rows["bare JSON-RPC, Streamable HTTP"].append(timed_raw(raw_http, uri, offset, (n + 1) * 10_000))
            raw_stdio.close()
    finally:
        http_server.terminate()
        http_server.wait(timeout=60)

    medians = {}
    print("| client, transport | median round trip (ms) | fastest (ms) | round medians (ms) |")
    print("| --- | ---: | ---: | --- |")
    for name, rounds in rows.items():
        per_round = [statistics.median(times) * 1000 for times in rounds]
        medians[name] = statistics.median(per_round)
        fastest = min(min(times) for times in rounds) * 1000
        print(f"| {name} | {medians[name]:.3f} | {fastest:.3f} | "
              f"{' '.join(f'{m:.3f}' for m in per_round)} |")
    for client in ("SDK client", "bare JSON-RPC"):
        http_ms, stdio_ms = medians[f"{client}, Streamable HTTP"], medians[f"{client}, stdio"]
        print(f"{client}: HTTP / stdio = {http_ms / stdio_ms:.2f} "
              f"({http_ms - stdio_ms:+.3f} ms)")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
