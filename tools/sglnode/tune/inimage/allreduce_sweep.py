"""All-reduce latency and bus bandwidth per NCCL env variant and TP group, with the image's own torch.

Runs inside the SGLang image (python3 allreduce_sweep.py ...). For each variant (a name and the full
environment the serving container would have: the PCIe defaults plus the variant's overrides) and each
group of GPUs, it starts one process per GPU (CUDA_VISIBLE_DEVICES = the group, env set before the
process group exists, since NCCL reads it when the communicator is created), all-reduces tensors of
each size, and records per size the p50 time per all-reduce (the slowest rank's), algorithm and bus
bandwidth (nccl-tests' definition: busbw = algbw x 2(n-1)/n). A run that does not finish within
--timeout-s is killed and recorded as failed: a hang at the first all-reduce is the PCIe IOMMU/ACS
failure mode, and the sweep must drop that variant rather than hang.

--backend gloo runs the same code on CPU processes (the group's GPU ids are only labels): CI uses it
to exercise the script, its JSON and the parsing in sglnode (sglnode/tune/nccl.py). Its figures say
nothing about NCCL; the JSON says so (`backend: gloo`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import queue
import socket
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

SCHEMA = 1
KIND = "sglnode-allreduce-sweep"
WARMUP_ITERS = 3
# Each size runs about this many bytes in total (bounded below and above), so small sizes get
# enough iterations for a stable p50 and large ones finish quickly.
TARGET_BYTES = 1 << 30
MIN_ITERS = 5
MAX_ITERS = 200
INIT_TIMEOUT_S = 60
JOIN_GRACE_S = 5


def parse_groups(text: str) -> list[list[int]]:
    """'0,1;0-3;4-7;0-7' -> [[0, 1], [0, 1, 2, 3], [4, 5, 6, 7], [0, ..., 7]]."""
    groups = []
    for part in text.split(";"):
        ranks: list[int] = []
        for item in part.split(","):
            if "-" in item:
                low, high = (int(v) for v in item.split("-"))
                ranks += list(range(low, high + 1))
            elif item.strip():
                ranks.append(int(item))
        if len(ranks) < 2:
            raise ValueError(f"group {part!r}: an all-reduce needs at least 2 ranks")
        groups.append(ranks)
    return groups


def parse_sizes(text: str) -> list[int]:
    """'1024:268435456' -> powers of two from 1 KiB to 256 MiB; or a comma list of byte counts."""
    if ":" in text:
        low, high = (int(v) for v in text.split(":"))
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= 2
        return sizes
    return [int(v) for v in text.split(",")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RunSpec:
    backend: str
    dtype: str
    sizes: list[int]
    env: dict[str, str]
    max_iters: int = MAX_ITERS


def _iters(size: int, max_iters: int) -> int:
    return max(MIN_ITERS, min(max_iters, TARGET_BYTES // max(size, 1)))


def _worker(rank: int, world: int, port: int, spec: RunSpec, out: Any) -> None:
    backend, dtype_name, sizes, env = spec.backend, spec.dtype, spec.sizes, spec.env
    os.environ.update(env)
    try:
        dtype = getattr(torch, dtype_name)
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S),
        )
        points = []
        element = torch.tensor([], dtype=dtype).element_size()
        for size in sizes:
            tensor = torch.ones(max(size // element, 1), dtype=dtype, device=device)
            for _ in range(WARMUP_ITERS):
                dist.all_reduce(tensor)
            iters = _iters(size, spec.max_iters)
            times = []
            for _ in range(iters):
                if backend == "nccl":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                dist.all_reduce(tensor)
                if backend == "nccl":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
            # The slowest rank's p50 is what a TP step waits for.
            p50 = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
            dist.all_reduce(p50, op=dist.ReduceOp.MAX)
            seconds = float(p50.item())
            algbw = size / seconds / 1e9
            points.append(
                {
                    "bytes": size,
                    "iters": iters,
                    "us_p50": round(seconds * 1e6, 3),
                    "algbw_gbps": round(algbw, 4),
                    "busbw_gbps": round(algbw * 2 * (world - 1) / world, 4),
                }
            )
        dist.barrier()
        if rank == 0:
            out.put({"ok": True, "sizes": points})
        dist.destroy_process_group()
    except Exception as exc:  # reported to the parent, which records the run as failed
        out.put(
            {
                "ok": False,
                "rank": rank,
                "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(),
            }
        )
        sys.exit(1)


def run_one(spec: RunSpec, ranks: list[int], timeout_s: float) -> dict[str, Any]:
    backend = spec.backend
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    child_env = {**spec.env}
    if backend == "nccl":
        child_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(r) for r in ranks)
    world = len(ranks)
    procs = [
        ctx.Process(target=_worker, args=(rank, world, port, spec, out), daemon=True) for rank in range(world)
    ]
    started = time.monotonic()
    saved = {k: os.environ.get(k) for k in child_env}
    # Spawned children inherit the parent's environment at start: set it for the start, then restore.
    os.environ.update(child_env)
    try:
        for proc in procs:
            proc.start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    result: dict[str, Any] | None = None
    deadline = started + timeout_s
    while result is None and time.monotonic() < deadline:
        try:
            message = out.get(timeout=0.5)
        except queue.Empty:
            if all(not p.is_alive() for p in procs):
                break
            continue
        result = message
    for proc in procs:
        proc.join(max(0.0, min(JOIN_GRACE_S, deadline - time.monotonic())))
    alive = [p for p in procs if p.is_alive()]
    for proc in alive:
        proc.kill()
        proc.join(JOIN_GRACE_S)
    elapsed = round(time.monotonic() - started, 2)
    if result is None:
        why = f"timed out after {timeout_s:g} s" if alive else "the ranks exited without a result"
        result = {"ok": False, "error": why + " (a hang at the first all-reduce: check IOMMU/ACS, P2P)"}
    return {**result, "elapsed_s": elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--variants", required=True, help='JSON file: {"name": {"ENV": "value", ...}, ...}')
    parser.add_argument("--groups", default="0,1;0-3;4-7;0-7", help="';'-separated GPU groups")
    parser.add_argument("--sizes", default="1024:268435456", help="LOW:HIGH (powers of 2) or a comma list")
    parser.add_argument("--dtype", default=None, help="default bfloat16 (nccl), float32 (gloo)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per variant and group")
    parser.add_argument(
        "--max-iters", type=int, default=MAX_ITERS, help="timed all-reduces per size, at most"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.variants, encoding="utf-8") as handle:
        variants: dict[str, dict[str, str]] = json.load(handle)
    groups = parse_groups(args.groups)
    sizes = parse_sizes(args.sizes)
    dtype = args.dtype or ("bfloat16" if args.backend == "nccl" else "float32")
    if args.backend == "nccl":
        if not torch.cuda.is_available():
            print("allreduce_sweep: --backend nccl needs GPUs (use --backend gloo on CPU)", file=sys.stderr)
            return 2
        needed = max(max(g) for g in groups) + 1
        if torch.cuda.device_count() < needed:
            print(
                f"allreduce_sweep: groups need {needed} GPUs, {torch.cuda.device_count()} visible",
                file=sys.stderr,
            )
            return 2
    nccl_version = None
    if args.backend == "nccl":
        nccl_version = ".".join(str(v) for v in torch.cuda.nccl.version())
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": KIND,
        "backend": args.backend,
        "device": torch.cuda.get_device_name(0) if args.backend == "nccl" else "cpu",
        "torch": torch.__version__,
        "nccl": nccl_version,
        "dtype": dtype,
        "sizes": sizes,
        "runs": [],
    }
    for name, env in variants.items():
        for ranks in groups:
            label = f"{name} ranks {ranks}"
            print(f"allreduce_sweep: {label} ...", file=sys.stderr, flush=True)
            spec = RunSpec(args.backend, dtype, sizes, {k: str(v) for k, v in env.items()}, args.max_iters)
            result = run_one(spec, ranks, args.timeout_s)
            run = {
                "variant": name,
                "env": env,
                "ranks": ranks,
                "world_size": len(ranks),
                "ok": bool(result.get("ok")),
                "error": result.get("error"),
                "elapsed_s": result["elapsed_s"],
                "sizes": result.get("sizes", []),
            }
            report["runs"].append(run)
            status = "ok" if run["ok"] else f"FAILED: {run['error']}"
            print(f"allreduce_sweep: {label}: {status} ({run['elapsed_s']} s)", file=sys.stderr, flush=True)
            with open(args.out, "w", encoding="utf-8") as handle:  # partial results survive a kill
                json.dump(report, handle, indent=1)
    return 0 if all(r["ok"] for r in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
