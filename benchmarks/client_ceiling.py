#!/usr/bin/env python3
"""Client ceiling of `sglnode bench` next to a minimal aiohttp client, both pinned to one core.

An "instant" server on loopback answers every streaming /generate request at once with
pre-encoded SSE events (one token each, chunked like uvicorn), so the only limit left is the
client. The server runs in its own process on another core; each client runs alone, pinned to
the same core, for the same number of requests at the same concurrency.

    python benchmarks/client_ceiling.py [--concurrency 64] [--requests 400] [--output-len 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from multiprocessing import get_context
from pathlib import Path
from typing import ClassVar

import uvloop

# Target from issue 6: the bench client must reach at least this multiple of the minimal client.
TARGET_RATIO = 3.0
SERVER_START_TIMEOUT_S = 10.0


# --- the instant server ----------------------------------------------------------------------
def _event(cum: int, total: int, prompt_tokens: int) -> bytes:
    """One /generate event in SGLang's shape (orjson, incremental text), framed as one HTTP chunk."""
    finish = '{"type":"length"}' if cum == total else "null"
    data = (
        f'data: {{"text":" tok","meta_info":{{"id":"bench","finish_reason":{finish},'
        f'"prompt_tokens":{prompt_tokens},"completion_tokens":{cum}}},"index":0}}\n\n'
    ).encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _response(total: int, prompt_tokens: int) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    body = b"".join(_event(i, total, prompt_tokens) for i in range(1, total + 1))
    done = b"data: [DONE]\n\n"
    return head + body + f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n"


class _Instant(asyncio.Protocol):
    # Pre-encoded responses by requested length, shared by all connections of the server process.
    cache: ClassVar[dict[int, bytes]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            at = body.find(b'"max_new_tokens":')
            total = int(body[at + 17 :].split(b",", 1)[0].split(b"}", 1)[0]) if at >= 0 else 16
            if total not in self.cache:
                self.cache[total] = _response(total, prompt_tokens=128)
            self.transport.write(self.cache[total])  # type: ignore[attr-defined]


def _serve(port_queue, core: int) -> None:
    os.sched_setaffinity(0, {core})

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Instant, "127.0.0.1", 0, backlog=1024)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    uvloop.run(main())


# --- the minimal aiohttp client: the usual Python design ---------------------------------------
MINIMAL_CLIENT = r"""
import asyncio, json, sys, time
import aiohttp
url, conc, reqs, out_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
payload = {"input_ids": [1000] * 128, "sampling_params": {"max_new_tokens": out_len, "ignore_eos": True},
           "stream": True}

async def main():
    tokens = 0
    left = reqs
    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn) as session:
        async def worker():
            nonlocal tokens, left
            while left > 0:
                left -= 1
                itl, last = [], time.perf_counter()
                async with session.post(url + "/generate", json=payload) as resp:
                    async for line in resp.content:
                        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                            continue
                        data = json.loads(line[6:])
                        now = time.perf_counter()
                        itl.append(now - last)
                        last = now
                        n = data["meta_info"]["completion_tokens"]
                tokens += n
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        wall = time.perf_counter() - start
    print(json.dumps({"output_tok_s": tokens / wall, "tokens": tokens, "wall_s": wall}))

asyncio.run(main())
"""


def _pinned(core: int):
    return lambda: os.sched_setaffinity(0, {core})


def run_minimal(url: str, core: int, args: argparse.Namespace) -> float:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            MINIMAL_CLIENT,
            url,
            str(args.concurrency),
            str(args.requests),
            str(args.output_len),
        ],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=_pinned(core),
        timeout=600,
    )
    return float(json.loads(out.stdout)["output_tok_s"])


def run_sglnode(url: str, cores: set[int], args: argparse.Namespace, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "bench.json"
        cmd = [
            sys.executable,
            "-m",
            "sglnode",
            "bench",
            "--url",
            url,
            "--api",
            "generate",
            "--concurrency",
            str(args.concurrency),
            "--num-requests",
            str(args.requests),
            "--output-len",
            str(args.output_len),
            "--input-len",
            "128",
            "--warmup",
            "0",
            "--workers",
            str(workers),
            "--json",
            str(report),
            "--no-progress",
        ]
        subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
            timeout=600,
            check=False,
        )
        stage = json.loads(report.read_text())["stages"][0]
        if stage["requests"]["ok"] != args.requests:
            raise SystemExit(f"sglnode bench had failures: {stage['requests']}")
        if stage["output_tokens"] != args.requests * args.output_len:
            raise SystemExit(f"sglnode bench miscounted tokens: {stage['output_tokens']}")
        return float(stage["output_tok_s"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--output-len", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each client; the best counts")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="also run sglnode bench with this many worker processes on free cores",
    )
    args = parser.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("needs two cores: one for the server, one for the client")
    server_core, client_core = cores[-1], cores[0]
    ctx = get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=_serve, args=(ports, server_core), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=SERVER_START_TIMEOUT_S)}"
        print(
            f"instant server on core {server_core}; clients pinned to core {client_core}; "
            f"concurrency {args.concurrency}, {args.requests} requests x {args.output_len} tokens"
        )
        minimal = max(run_minimal(url, client_core, args) for _ in range(args.repeat))
        print(f"minimal aiohttp client : {minimal:12,.0f} output tok/s")
        ours = max(run_sglnode(url, {client_core}, args, 1) for _ in range(args.repeat))
        print(f"sglnode bench (1 core) : {ours:12,.0f} output tok/s")
        ratio = ours / minimal
        print(
            f"ratio                  : {ratio:12.2f}x (target >= {TARGET_RATIO:g}x) "
            f"{'PASS' if ratio >= TARGET_RATIO else 'MISS'}"
        )
        if args.workers > 1:
            free = set(cores) - {server_core}
            multi = max(run_sglnode(url, free, args, args.workers) for _ in range(args.repeat))
            print(f"sglnode bench ({args.workers} workers on {len(free)} cores): {multi:,.0f} output tok/s")
        return 0 if ratio >= TARGET_RATIO else 1
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    sys.exit(main())
