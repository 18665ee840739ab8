"""`sglnode sim [python3 -m sglang.launch_server] <SGLang flags>`: run the SGLang test double.

Every argument after `sim` belongs to SGLang's parser (rebuilt by the simulator), so `sglnode sim
--help` prints SGLang's flags plus the SGLNODE_SIM_* environment knobs.
"""

from __future__ import annotations

import argparse

from sglnode.sim.main import run_sim

# A prefix character no flag uses: `sglnode`'s own parser then hands every argument, `--help`
# included, to the simulator's SGLang parser untouched.
PASS_THROUGH_PREFIX = "\0"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="run a SIMULATED SGLang server (test double, no GPU): sglnode sim <SGLang launch flags>",
        add_help=False,
        prefix_chars=PASS_THROUGH_PREFIX,
    )
    parser.add_argument("sglang_argv", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_sim(list(args.sglang_argv))
