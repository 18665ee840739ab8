"""`sglnode plan`: will a model fit on a GPU at a TP size and memory fraction, and how fast can decode be.

Without --mem-fraction-static the plan uses the pinned SGLang's own default for this GPU, TP and role,
as the server would. Exit codes (sglnode.exitcodes): 0 fits, 1 does not fit (the phase that fails
is printed), 64 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from sglnode.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sglnode.pins import PINS
from sglnode.planning.planner import (
    DEFAULT_CONCURRENCY,
    DEFAULT_ROOFLINE_CONTEXT_TOKENS,
    PlanResult,
    plan,
    resolve_model,
)
from sglnode.planning.presets import HARDWARE_DIR, MODELS_DIR, PresetError, list_presets, load_gpu
from sglnode.topology.model import ROLES, Server, Speculative
from sglnode.upstream import catalog

EXIT_FITS = EXIT_OK
EXIT_DOES_NOT_FIT = EXIT_FAILED
EXIT_BAD_INPUT = EXIT_USAGE
# Bounds no real plan comes near; they keep hostile input from overflowing the arithmetic.
MAX_PARALLEL = 4096
MAX_TOKENS = 1 << 30
MAX_GB = 1e6
MAX_TBS = 1000.0


def _integer(low: int, high: int, also: tuple[int, ...] = ()) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from exc
        if value not in also and not low <= value <= high:
            allowed = " or ".join([*(str(a) for a in also), f"{low}..{high}"])
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {value}")
        return value

    return parse


def _number(
    low: float, high: float, *, low_open: bool = True, high_open: bool = False
) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not math.isfinite(value) or not (above and below):
            left, right = "(" if low_open else "[", ")" if high_open else "]"
            raise argparse.ArgumentTypeError(
                f"must be a finite number in {left}{low:g}, {high:g}{right}, got {text}"
            )
        return value

    return parse


def _concurrency(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) < 1 or max(values) > MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"concurrency values must be in 1..{MAX_TOKENS}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="memory plan and decode roofline for a model on a GPU (before launching SGLang)",
        description=(
            f"SGLang {catalog.load_version()}'s own launch defaults and KV budget (rest = "
            "free_after_weights - free_before_load x (1 - mem_fraction_static)), and a bandwidth roofline. "
            "Estimates, not "
            f"measurements. GPU presets: {', '.join(list_presets(HARDWARE_DIR))}. "
            f"Model presets: {', '.join(list_presets(MODELS_DIR))}."
        ),
    )
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", help="model preset name")
    model.add_argument("--config", help="a Hugging Face config.json")
    parser.add_argument("--weights-gb", type=_number(0, MAX_GB), help="total weight size in GB (2**30 bytes)")
    parser.add_argument("--checkpoint", help="checkpoint dir or its model.safetensors.index.json")
    parser.add_argument("--gpu", default=PINS.gpu.preset, help="GPU preset (default: %(default)s)")
    parser.add_argument(
        "--gpu-mem-gb", type=_number(0, MAX_GB), help="override GPU memory (GB as torch reports it)"
    )
    parser.add_argument("--gpu-bw-tbs", type=_number(0, MAX_TBS), help="override GPU memory bandwidth (TB/s)")
    parser.add_argument("--tp", type=_integer(1, MAX_PARALLEL), default=1)
    parser.add_argument("--dp", type=_integer(1, MAX_PARALLEL), default=1)
    parser.add_argument("--ep", type=_integer(1, MAX_PARALLEL), default=1)
    parser.add_argument("--role", choices=ROLES, default="regular", help="PD role (default: %(default)s)")
    parser.add_argument(
        "--mem-fraction-static",
        type=_number(0, 1, high_open=True),
        help="default: SGLang's own for this GPU, TP and role",
    )
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument(
        "--context-length", type=_integer(1, MAX_TOKENS), help="default: the model's max_position_embeddings"
    )
    parser.add_argument(
        "--cuda-graph-max-bs-decode",
        type=_integer(1, MAX_TOKENS),
        help="default: SGLang's for this GPU and TP",
    )
    parser.add_argument(
        "--chunked-prefill-size",
        type=_integer(1, MAX_TOKENS, also=(-1,)),
        help="default: SGLang's for this GPU",
    )
    parser.add_argument(
        "--max-running-requests",
        type=_integer(1, MAX_TOKENS),
        help="default: the model's or SGLang's estimate",
    )
    parser.add_argument("--speculative-algorithm", help="e.g. EAGLE, EAGLE3 (adds draft weights and KV)")
    parser.add_argument(
        "--speculative-num-draft-tokens", type=_integer(1, 1024), help="tokens verified per step"
    )
    parser.add_argument(
        "--concurrency",
        type=_concurrency,
        default=list(DEFAULT_CONCURRENCY),
        help="comma-separated concurrencies for the roofline (default: 1,16,64)",
    )
    parser.add_argument(
        "--roofline-context",
        type=_integer(1, MAX_TOKENS),
        default=DEFAULT_ROOFLINE_CONTEXT_TOKENS,
        help="average context tokens per running request in the roofline (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def _gpu(args: argparse.Namespace) -> Any:
    overrides: dict[str, Any] = {}
    if args.gpu_mem_gb is not None:
        overrides["memory_gb"] = args.gpu_mem_gb
    if args.gpu_bw_tbs is not None:
        overrides["bandwidth_tbs"] = args.gpu_bw_tbs
    return load_gpu({"preset": args.gpu, **overrides} if overrides else args.gpu)


def server_from_args(args: argparse.Namespace) -> Server:
    """The topology's server model, built from SGLang's own flag names."""
    speculative = None
    if args.speculative_algorithm:
        speculative = Speculative(
            algorithm=args.speculative_algorithm.upper(),
            num_steps=None,
            eagle_topk=None,
            num_draft_tokens=args.speculative_num_draft_tokens,
            draft_model_path=None,
        )
    extra = {"max_running_requests": args.max_running_requests} if args.max_running_requests else {}
    return Server(
        name="plan",
        role=args.role,
        tp=args.tp,
        dp=args.dp,
        ep=args.ep,
        mem_fraction_static=args.mem_fraction_static,
        kv_cache_dtype=args.kv_cache_dtype,
        context_length=args.context_length,
        chunked_prefill_size=args.chunked_prefill_size,
        cuda_graph_max_bs_decode=args.cuda_graph_max_bs_decode,
        speculative=speculative,
        args=extra,
    )


def build_plan(args: argparse.Namespace) -> PlanResult:
    model = resolve_model(
        preset=args.model, config=args.config, weights_gb=args.weights_gb, checkpoint=args.checkpoint
    )
    return plan(model, _gpu(args), server_from_args(args), args.concurrency, args.roofline_context)


def format_text(result: PlanResult) -> str:
    server = result.server
    defaults = result.sglang
    version = catalog.load_version()
    lines = [
        f"model {result.model.name} ({result.model.weights_gb:.2f} GB) on {result.gpu.name} "
        f"({result.gpu.memory_gb:.2f} GB, {result.gpu.bandwidth_tbs} TB/s): tp={server.tp} dp={server.dp} "
        f"ep={server.ep or 1} role={server.role}",
        f"  mem fraction      {result.mem_fraction_static} ({result.mem_fraction_source}; SGLang {version} "
        f"default {defaults.default_mem_fraction_static}, at most {defaults.max_safe_mem_fraction_static})",
        f"  SGLang reserve    {defaults.reserved_mb / 1024:8.2f} GB (activations for "
        f"{defaults.activation_tokens} tokens, graphs up to bs {defaults.decode_max_bs}: "
        f"{defaults.needed_mb / 1024:.2f} GB; 10 GiB floor)",
        f"  free before load  {result.pre_load_free_gb:8.2f} GB per GPU (estimate)",
        f"  weights           {result.weights_per_gpu_gb:8.2f} GB per GPU (estimate)",
        f"  KV budget         {result.kv_budget_gb:8.2f} GB",
        f"  KV pool           {result.kv_pool_gb:8.2f} GB = {result.kv_tokens} tokens "
        f"({result.kv_cell_bytes:.0f} B/token, {result.kv_cache_dtype}, page {result.page_size})",
        f"  max requests      {result.max_running_requests} running; {result.max_concurrent_requests} at "
        f"{result.context_length} tokens of context",
        f"  headroom          {result.headroom_gb:8.2f} GB "
        f"(SGLang expects ~{result.reserve_estimate_gb:.2f} GB)",
        f"  min mem fraction  {result.min_mem_fraction_static}",
        ("FITS: " if result.fits else f"DOES NOT FIT ({result.failure_phase}): ") + result.reason,
    ]
    lines.extend(f"RISK ({risk.code}): {risk.message}" for risk in result.risks)
    if result.roofline:
        lines.append(
            f"decode roofline (estimate, {result.roofline_context_tokens} tokens of context per request):"
        )
        lines.append(f"  {'concurrency':>11} {'tok/s':>10} {'tok/s/req':>10} {'GB/step':>9}")
        for p in result.roofline:
            note = "  (capped by KV pool)" if p.limited_by_kv_cache else ""
            lines.append(
                f"  {p.concurrency:>11} {p.decode_tok_s:>10.1f} {p.per_request_tok_s:>10.2f} "
                f"{p.bytes_per_step_gb:>9.2f}{note}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        result = build_plan(args)
    except PresetError as exc:
        print(f"sglnode plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ValueError, ArithmeticError) as exc:
        # Input the checks above let through but the arithmetic cannot use: still the input's fault.
        print(f"sglnode plan: cannot plan this input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(result.to_json(), indent=2) if args.json else format_text(result))
    return EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
