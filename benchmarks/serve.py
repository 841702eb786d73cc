"""Throughput and latency of ``metaagent-serve``: 1 vs 8 concurrent clients, with and without batching.

The real command is started as a subprocess (``--frozen-designer single_math``: one agent per team, so a
request is one executor generation of at most ``--max-tokens`` tokens plus the sandbox round trip), once
per mode (``--modes``): ``nobatch`` (``--max-batch-size 1``: every agent call is its own forward pass),
``batched`` (``--max-batch-size 32``: the batcher groups concurrent calls, static batches) and
``continuous`` (also ``--continuous --backend-in-flight 4``: new calls join the running batch).
For each server, ``--clients 1,8`` client threads each send ``--requests-per-client`` ``POST /v1/teams``
requests back to back (fixed tasks and seeds, so every setting generates comparable text), after one
warm-up request. All servers are started first and the settings are measured interleaved (every mode at 1
client, then every mode at 8), so a changing background load does not favour one mode. Reported per
setting: requests/s, p50/p95 latency, completion tokens/s, and the mean backend batch size read from
``/metrics``; then the speed-ups over ``nobatch`` at the largest client count.

Numbers on a shared CPU are noisy: the load average is printed next to them.

    .venv/bin/python benchmarks/serve.py [--model embedded] [--max-tokens 32] [--requests-per-client 4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

QUESTIONS = [
    "What is 17 * 23?",
    "What is the sum of the first 10 positive integers?",
    "Solve for x: 3x + 5 = 20.",
    "What is 2 to the power 10?",
    "How many degrees are in the interior angles of a hexagon?",
    "What is the greatest common divisor of 84 and 36?",
    "What is 15% of 240?",
    "What is the area of a circle of radius 3? Use pi = 3.14.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``metaagent-serve`` in a subprocess, waited on until healthy, stopped with SIGTERM."""

    def __init__(self, args: argparse.Namespace, mode_args: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = str(Path(sys.executable).parent / "metaagent-serve")
        # kept after the run (delete=False) so a failed server can be diagnosed from its log
        self.log = tempfile.NamedTemporaryFile("w+", prefix="serve-bench-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [command, "--model", args.model, "--frozen-designer", "single_math", "--port", str(self.port),
             "--workers", str(args.workers), "--max-tokens", str(args.max_tokens),
             "--max-concurrent-requests", "64", "--log-level", "warning", "--timeout", str(args.timeout),
             *mode_args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}); log: {self.log.name}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server did not become healthy; log: {self.log.name}")

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def batcher(self) -> tuple[float, float]:
        """(backend calls, requests) of the executor's batcher so far."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        calls = re.search(r'metaagent_serve_batcher_calls_total\{model="[^"]+"\} (\S+)', text)
        requests = re.search(r'metaagent_serve_batcher_requests_total\{model="[^"]+"\} (\S+)', text)
        return float(calls.group(1)) if calls else 0.0, float(requests.group(1)) if requests else 0.0


#: server flags of each mode
MODES = {
    "nobatch": ["--max-batch-size", "1"],
    "batched": ["--max-batch-size", "32"],
    "continuous": ["--max-batch-size", "32", "--continuous", "--backend-in-flight", "4"],
}


def run_clients(url: str, clients: int, per_client: int, seed0: int) -> tuple[float, list[float], int, int]:
    """``clients`` threads, each sending ``per_client`` requests in a row; returns wall time, latencies,
    completion tokens and failed requests."""
    latencies: list[float] = []
    tokens = [0]
    failures = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as http:
            barrier.wait()
            for k in range(per_client):
                i = c * per_client + k
                body = {"task": QUESTIONS[i % len(QUESTIONS)], "seed": seed0 + i}
                t0 = time.perf_counter()
                r = http.post("/v1/teams", json=body)
                elapsed = time.perf_counter() - t0
                with lock:
                    if r.status_code != 200 or r.json()["status"] != "answered":
                        failures[0] += 1
                        continue
                    latencies.append(elapsed)
                    tokens[0] += r.json()["usage"]["completion_tokens"]

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies, tokens[0], failures[0]


def measure(server: Server, mode: str, n: int, per_client: int) -> dict[str, float | str | int]:
    calls0, req0 = server.batcher()
    load = os.getloadavg()[0]
    wall, lat, tokens, failed = run_clients(server.url, n, per_client, seed0=0)
    calls1, req1 = server.batcher()
    done = len(lat)
    r = {
        "mode": mode, "clients": n, "requests": done, "failed": failed,
        "seconds": wall, "rps": done / wall, "p50_s": percentile(lat, 0.5),
        "p95_s": percentile(lat, 0.95), "tokens_per_s": tokens / wall,
        "mean_batch": (req1 - req0) / (calls1 - calls0) if calls1 > calls0 else float("nan"),
        "load_avg": load,
    }  # fmt: skip
    print(f"{mode:<10} clients={n:<2} {done} ok/{failed} failed in {wall:6.1f} s  "
          f"{r['rps']:.2f} req/s  p50 {r['p50_s']:.2f} s  p95 {r['p95_s']:.2f} s  "
          f"{r['tokens_per_s']:.1f} tok/s  mean batch {r['mean_batch']:.2f}  load {load:.2f}", flush=True)  # fmt: skip
    return r


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--clients", default="1,8")
    p.add_argument("--modes", default="nobatch,batched", help=f"comma-separated, of {sorted(MODES)}")
    p.add_argument("--workers", type=int, default=8, help="sandbox workers (>= the largest client count)")
    p.add_argument("--timeout", type=float, default=1800, help="server --timeout: generous, a loaded CPU is slow")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        p.error(f"unknown mode(s) {sorted(unknown)}; choose from {sorted(MODES)}")

    rows = []
    with contextlib.ExitStack() as stack:
        # every mode's server is up before measuring; the measurements then interleave (all modes at 1
        # client, then all at 8), so the background load of a shared machine biases no mode in particular
        servers = {mode: stack.enter_context(Server(args, MODES[mode])) for mode in modes}
        for server in servers.values():
            run_clients(server.url, 1, 1, seed0=10_000)  # warm-up: first forward passes, sandbox workers
        for n in clients:
            for mode, server in servers.items():
                rows.append(measure(server, mode, n, args.requests_per_client))

    print(f"\nmodel {args.model}, frozen single_math, max_tokens {args.max_tokens}, "
          f"{args.requests_per_client} requests per client, {os.cpu_count()} CPUs (shared; timings are noisy)")  # fmt: skip
    print(f"{'mode':>10}{'clients':>8}{'req/s':>8}{'p50 s':>8}{'p95 s':>8}{'tok/s':>8}{'mean batch':>11}{'load':>6}")
    for r in rows:
        print(f"{r['mode']:>10}{r['clients']:>8}{r['rps']:>8.2f}{r['p50_s']:>8.2f}{r['p95_s']:>8.2f}"
              f"{r['tokens_per_s']:>8.1f}{r['mean_batch']:>11.2f}{r['load_avg']:>6.2f}")  # fmt: skip
    by = {(r["mode"], r["clients"]): r for r in rows}
    top, low = max(clients), min(clients)
    for mode in modes:
        if mode != "nobatch" and ("nobatch", top) in by and (mode, top) in by:
            print(f"{mode} vs nobatch at {top} clients: {by[(mode, top)]['rps'] / by[('nobatch', top)]['rps']:.2f}x req/s")
    for mode in modes:
        if top != low and (mode, top) in by and (mode, low) in by:
            print(f"{mode}: {top} clients vs {low}: {by[(mode, top)]['rps'] / by[(mode, low)]['rps']:.2f}x req/s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
