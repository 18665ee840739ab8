"""`sglnode diagnose --json LOG` in a child process that reports its own peak memory.

VmHWM is the child's own peak RSS (ru_maxrss would also carry pytest's peak across the exec), so a test can
hold the diagnosis of a large log to a memory bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUNNER = """
import json, re, sys
from pathlib import Path
from sglnode.cli import main
rc = main(["diagnose", "--json", sys.argv[1]])
sys.stdout.flush()
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
print(json.dumps({"rc": rc, "max_rss_kib": peak}), file=sys.stderr)
"""


def diagnose_in_child(log: Path) -> tuple[dict, float]:
    """The diagnosis (JSON) of `log` and the child's peak RSS in MiB; fails the test if the CLI failed."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(log)], capture_output=True, text=True, timeout=600, check=False
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["rc"] == 0, done.stderr[-2000:]
    return json.loads(done.stdout), report["max_rss_kib"] / 1024
