"""Benchmarks `agentrun mcp` from the official MCP Python SDK (see scripts/bench-mcp.sh).

Usage: bench_mcp.py AGENTRUN WORKDIR

1. Page reads deep in a 1 GiB artifact: the round trip of a `read` tool call for a 2000-line
   page at offsets from the start to the end, through the server, against `agentrun read` of
   the same page as a process (what a client without the server would do).
2. Server memory under 32 concurrent `run` calls, each printing 64 MiB: the server's peak
   resident set (VmHWM) against one call alone.
"""

import os
import statistics
import subprocess
import sys
import threading
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

PY = sys.executable
LINE = 100  # bytes per generated line, newline included
GIB = int(os.environ.get("BENCH_MCP_BYTES", 1 << 30))  # artifact size
READS = 25

GENERATE = (
    "import sys\n"
    "total, width = int(sys.argv[1]), int(sys.argv[2])\n"
    "out = sys.stdout.buffer\n"
    "n = 0\n"
    "while n * width < total:\n"
    "    block = b''.join(b'%0*d\\n' % (width - 1, i) for i in range(n, n + 10000))\n"
    "    out.write(block)\n"
    "    n += 10000\n"
)


def params(agentrun, store):
    return StdioServerParameters(
        command=agentrun, args=["--store", store, "mcp", "--allow", PY], env=dict(os.environ)
    )


def server_pid(marker_store):
    """The pid of the `agentrun … mcp` process serving `marker_store`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if marker_store.encode() in argv and b"mcp" in argv:
            return int(pid)
    raise RuntimeError("server process not found")


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


async def page_reads(agentrun, work):
    store = os.path.join(work, "store-pages")
    results = {}
    async with stdio_client(params(agentrun, store)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            t0 = time.monotonic()
            run = await s.call_tool(
                "run", {"command": [PY, "-c", GENERATE, str(GIB), str(LINE)], "timeout_seconds": 3600}
            )
            capture_s = time.monotonic() - t0
            text = run.content[0].text
            uri = text.split('read(filePath="', 1)[1].split('"', 1)[0]
            total_lines = -(-GIB // LINE)
            total_lines = ((total_lines + 9999) // 10000) * 10000
            offsets = [0, total_lines // 4, total_lines // 2, 3 * total_lines // 4, total_lines - 2000]
            for offset in offsets:
                times = []
                for _ in range(READS):
                    t = time.perf_counter()
                    page = await s.call_tool("read", {"filePath": uri, "offset": offset})
                    times.append((time.perf_counter() - t) * 1000)
                    assert not page.is_error, page.content[0].text
                    assert len(page.content[0].text) == 2000 * LINE
                cli = []
                for _ in range(READS):
                    t = time.perf_counter()
                    subprocess.run(
                        [agentrun, "--store", store, "read", uri, "--offset", str(offset)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                    )
                    cli.append((time.perf_counter() - t) * 1000)
                results[offset] = (statistics.median(times), statistics.median(cli))
    return capture_s, total_lines, results


async def concurrent_memory(agentrun, work, calls, each):
    store = os.path.join(work, f"store-mem-{calls}-{each}")
    peak = {}
    async with stdio_client(params(agentrun, store)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            pid = server_pid(store)
            base = rss_kib(pid, "VmRSS")
            stop = threading.Event()
            samples = []

            def sample():
                while not stop.is_set():
                    samples.append(rss_kib(pid, "VmRSS"))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            t0 = time.monotonic()

            async def one(n):
                result = await s.call_tool(
                    "run", {"command": [PY, "-c", GENERATE, str(each), str(LINE)], "timeout_seconds": 600}
                )
                assert "[Exit code 0" in result.content[0].text, result.content[0].text[-300:]

            async with anyio.create_task_group() as group:
                for n in range(calls):
                    group.start_soon(one, n)
            elapsed = time.monotonic() - t0
            stop.set()
            sampler.join()
            peak = {"base": base, "peak": max(samples), "hwm": rss_kib(pid, "VmHWM"), "elapsed": elapsed}
    return peak


async def main(agentrun, work):
    capture_s, total_lines, pages = await page_reads(agentrun, work)
    print(f"{GIB / 2**20:.0f} MiB artifact ({total_lines} lines of {LINE} bytes) captured through `run` in {capture_s:.1f} s")
    print("| offset (line) | MCP `read` round trip, median ms | `agentrun read` process, median ms | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for offset, (mcp, cli) in pages.items():
        print(f"| {offset} | {mcp:.2f} | {cli:.2f} | {mcp / cli:.2f} |")
    big = int(os.environ.get("BENCH_MCP_CALL_BYTES", 64 << 20))
    cases = [(1, big), (32, big // 32), (32, big)]
    measured = [(n, each, await concurrent_memory(agentrun, work, n, each)) for n, each in cases]
    print()
    print("| concurrent `run` calls | output per call, MiB | server RSS before, MiB | peak RSS, MiB | VmHWM, MiB | wall s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, each, m in measured:
        print(f"| {n} | {each / 2**20:.0f} | {m['base'] / 1024:.1f} | {m['peak'] / 1024:.1f} | {m['hwm'] / 1024:.1f} | {m['elapsed']:.1f} |")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
