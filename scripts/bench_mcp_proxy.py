"""Proxy overhead: the round trip of a small tools/call (`read_text_file` of a 1 KB file) to
the official filesystem server alone and through `agentrun mcp proxy`, median of 100 calls
each, after 10 warm-up calls; raw newline-delimited JSON-RPC on the pipes, so that only the
server (and the proxy) are measured.

Usage: bench_mcp_proxy.py AGENTRUN NODE FILESYSTEM_SERVER WORKDIR
"""

import json
import os
import statistics
import subprocess
import sys
import time


def measure(command, path, calls=100, warmup=10):
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)

    def call(message):
        child.stdin.write((json.dumps(message) + "\n").encode())
        child.stdin.flush()
        while True:
            line = child.stdout.readline()
            if not line:
                raise SystemExit(f"{command[0]} ended")
            if json.loads(line).get("id") == message["id"]:
                return line

    call({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}})
    child.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    child.stdin.flush()
    times = []
    for i in range(warmup + calls):
        message = {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                   "params": {"name": "read_text_file", "arguments": {"path": path}}}
        start = time.perf_counter()
        call(message)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    child.stdin.close()
    child.wait(timeout=30)
    return statistics.median(times) * 1000, min(times) * 1000


def main():
    agentrun, node, fs, work = sys.argv[1:5]
    root = os.path.join(work, "files")
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "small.txt")
    with open(path, "w") as f:
        f.write("".join("line %d of a small file\n" % i for i in range(40)))
    direct = [node, fs, root]
    proxied = [agentrun, "--store", os.path.join(work, "store"), "mcp", "proxy", "--", *direct]
    # Alternate, so that a busy spell of the machine hits both alike.
    rows = {"server alone": [], "through agentrun mcp proxy": []}
    for _ in range(3):
        rows["server alone"].append(measure(direct, path))
        rows["through agentrun mcp proxy"].append(measure(proxied, path))
    print("| Path | Median round trip (ms) | Fastest (ms) | Round medians (ms) |")
    print("| --- | ---: | ---: | --- |")
    medians = {}
    for name, runs in rows.items():
        medians[name] = statistics.median(r[0] for r in runs)
        fastest = min(r[1] for r in runs)
        rounds = " ".join(f"{r[0]:.3f}" for r in runs)
        print(f"| {name} | {medians[name]:.3f} | {fastest:.3f} | {rounds} |")
    alone, through = medians["server alone"], medians["through agentrun mcp proxy"]
    print(f"Added by the proxy: {through - alone:.3f} ms at the median ({through / alone:.2f}x)")


if __name__ == "__main__":
    main()
