"""A log reaches `sglnode diagnose` through something: `docker compose logs`, journald, `kubectl logs
--timestamps`, a launcher's rank prefix, a quote or an indented code block in a report, a copy from a
web page. What carried
it must not change the diagnosis: every train excerpt of the corpus, carried each way, gets the
answer it gets as written.

(Train only: the held-out split is scored by the benchmark and nothing else.)
"""

import html
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sglnode.diagnosis.diagnose import Diagnoser, LogLine, as_written, diagnose_lines, numbered, split_carrier

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import diagnosis_accuracy as bench  # noqa: E402

from sglnode.readiness.startup import Stage  # noqa: E402

TRAIN = [item for item in bench.load_corpus() if item.meta["split"] == "train"]


def answer(lines: list[str]) -> str:
    diagnosis = diagnose_lines(numbered(lines, source="carried"))
    return f"{diagnosis.cause}({diagnosis.phase})" if diagnosis.phase else diagnosis.cause


def web_typography(line: str) -> str:
    """What a rendered page makes of a line: non-breaking spaces, curly quotes."""
    curly = re.sub(r'"([^"]*)"', "\u201c\\1\u201d", line).replace("'", "\u2019")
    return curly.replace(" ", "\xa0")


PYTHON_FRAME_RE = re.compile(r'^(\s*)File "(/[^"]+)", line (\d+), in (\w+)$')


def ipython_frame(line: str) -> str:
    """A frame as IPython (Jupyter) prints it: path:line and the qualified function with its arguments."""
    return PYTHON_FRAME_RE.sub(lambda m: f"File {m[2]}:{m[3]}, in Runner.{m[4]}(self, *args)", line)


CARRIERS: dict[str, Callable[[int, str], str]] = {
    "docker compose logs": lambda _, line: f"sglang-decode-1  | {line}",
    "journald": lambda n, line: f"Dec 01 12:{n // 60 % 60:02d}:{n % 60:02d} gpu-node-1 python3[4242]: {line}",
    "logs --timestamps": lambda n, line: f"2026-12-01T12:00:{n % 60:02d}.123456789Z {line}",
    "a report's quote": lambda _, line: f"> {line}",
    "a web page's typography": lambda _, line: web_typography(line),
    "HTML-escaped text": lambda _, line: html.escape(line),
    "compose over --timestamps": lambda n, line: f"router-1  | 2026-12-01T12:00:{n % 60:02d}.5Z {line}",
    "kubectl logs --prefix": lambda _, line: f"[pod/sglang-decode-0/sglang] {line}",
    "docker service logs": lambda _, line: f"sglang_decode.1.x7k2m9q4@gpu-node-1    | {line}",
    "pm2 logs": lambda _, line: f"0|sglang   | {line}",
    "kubelet's CRI log file": lambda n, line: f"2026-12-01T12:00:{n % 60:02d}.123456789Z stderr F {line}",
    "Docker's json-file log": lambda _, line: json.dumps(
        {"log": f"{line}\n", "stream": "stderr", "time": "2026-12-01T12:00:00.1Z"}, separators=(",", ":")
    ),
    # syslog relays (rsyslog, a collector's file): the priority kept, RFC 3164's or RFC 5424's header
    "syslog with its priority": lambda n, line: (
        f"<11>Dec  1 12:00:{n % 60:02d} gpu-node-1 sglang[4242]: {line}"
    ),
    "RFC 5424 syslog": lambda n, line: (
        f"<11>1 2026-12-01T12:00:{n % 60:02d}.003Z gpu-node-1 sglang 4242 - - {line}"
    ),
    "fluentd's stdout": lambda n, line: (
        f"2026-12-01 12:00:{n % 60:02d}.123456789 +0000\tdocker.sglang\t" + json.dumps({"log": line})
    ),
    # a wrapper script's logger stamping what it relays (Python logging's asctime, a plain date)
    "a logger's asctime stamp": lambda n, line: f"2026-12-01 12:00:{n % 60:02d},123 {line}",
    "pytest's failure report": lambda _, line: f"E       {line}",
    "a code view's line numbers": lambda n, line: f"{n + 1:>4} | {line}",
    "a terminal copy's trailing blanks": lambda _, line: f"{line}   ",
    # a report's code block: every line of the excerpt indented alike
    "a report's indented code block": lambda _, line: f"    {line}" if line.strip() else line,
    "a tab-indented paste": lambda _, line: f"\t{line}" if line.strip() else line,
    # launchers name the process that spoke
    "torchrun's rank": lambda n, line: f"[rank{n % 4}]: {line}",
    "torchrun --tee": lambda n, line: f"[default{n % 4}]:{line}",
    "srun --label": lambda n, line: f"{n % 4}: {line}",
    "Ray's worker": lambda _, line: f"(RayWorkerWrapper pid=4242, ip=10.0.0.2) {line}",
    "Ray Serve's replica": lambda _, line: f"(ServeReplica:default:VLLMDeployment pid=4242) {line}",
    # Ray's log deduplication counting the workers that printed a line alike
    "Ray's repeated-line suffix": lambda _, line: (
        f"(RayWorkerWrapper pid=4242) {line} [repeated 3x across cluster]"
    ),
    "vLLM's TP worker": lambda n, line: f"(VllmWorker TP{n % 2} pid=4242) {line}",
    "vLLM's engine core over compose": lambda _, line: f"vllm-1  | (EngineCore_DP0 pid=4242) {line}",
    # a traceback printed by IPython (a notebook) instead of Python
    "Jupyter's traceback frames": lambda _, line: ipython_frame(line),
}


@pytest.fixture(scope="module")
def as_written_answers() -> dict[str, str]:
    return {item.name: answer(item.lines) for item in TRAIN}


@pytest.mark.parametrize("carrier", CARRIERS)
def test_what_carried_a_log_does_not_change_its_diagnosis(carrier, as_written_answers):
    carry = CARRIERS[carrier]
    carried = {item.name: answer([carry(n, line) for n, line in enumerate(item.lines)]) for item in TRAIN}
    changed = [
        f"{name}: {as_written_answers[name]} as written, {got} carried"
        for name, got in carried.items()
        if got != as_written_answers[name]
    ]
    assert not changed, "\n".join(changed)


def test_a_traceback_quoted_in_one_line_with_escaped_newlines_gets_the_same_answer(as_written_answers):
    # A client's log quoting the server's error body (JSON), or a repr of a child's stderr: the traceback
    # and everything after it on one line, newlines and quotes escaped.
    changed = []
    for item in TRAIN:
        start = next(
            (n for n, line in enumerate(item.lines) if line.startswith("Traceback (most recent")), None
        )
        if start is None:
            continue
        body = "\\n".join(line.replace('"', '\\"') for line in item.lines[start:])
        got = answer([*item.lines[:start], f'ERROR: request failed: {{"detail": "{body}"}}'])
        if got != as_written_answers[item.name]:
            changed.append(f"{item.name}: {as_written_answers[item.name]} as written, {got} quoted")
    assert not changed, "\n".join(changed)


def test_a_paste_that_lost_its_newlines_is_read_line_by_line(as_written_answers):
    # A copy from a web page that joined a torchrun log's lines with spaces: each line still opens with
    # its rank's prefix, and that prefix is where the lines were (three lines at least: a line may name
    # its rank once inside).
    changed, flattened = [], 0
    for item in TRAIN:
        lines = [line for line in item.lines if line.strip()]
        if len(lines) < 3 or any("[rank3]:" in line for line in lines):
            continue
        flattened += 1
        got = answer([" ".join(f"[rank3]: {line}" for line in lines)])
        if got != as_written_answers[item.name]:
            changed.append(f"{item.name}: {as_written_answers[item.name]} as written, {got} flattened")
    assert flattened > 800
    assert not changed, "\n".join(changed)


def test_the_kernels_journald_lines_keep_their_prefix():
    # The host OOM killer's evidence names the kernel; journald's prefix for it is part of the evidence.
    line = "May 19 08:46:24 ubuntu kernel: [107061.602328] main invoked oom-killer: gfp_mask=0x1100dca"
    assert as_written(line) == line
    assert as_written("May 19 08:46:24 ubuntu python3[42]: Traceback (most recent call last):") == (
        "Traceback (most recent call last):"
    )
    relayed = "<6>1 2026-12-01T12:00:00Z ubuntu kernel - - - Out of memory: Killed process 42 (python3)"
    assert as_written(relayed) == relayed


def test_sglang_milestones_under_a_compose_prefix_still_move_the_stage():
    # `docker compose logs -f` is what `sglnode wait` may follow: SGLang's "[date TP0] " prefix must
    # still open the line, or the line's rank is lost (each rank's stage places an OOM's phase).
    diagnoser = Diagnoser()
    diagnoser.feed(LogLine(1, "sglang-1  | [2026-12-01 12:00:00 TP1] Load weight begin. avail mem=94.50 GB"))
    assert diagnoser.tracker.rank_stages == {1: Stage.WEIGHTS}


def test_a_bar_inside_a_line_and_a_hyphenated_name_are_not_a_carrier():
    # Only a compose-style "name-N  | " at column 0 is a shipper's prefix.
    lines = ("[GIN] 2024/05/01 - 12:00:00 | 200 |  1.2ms | POST /v1/chat", "TP0 | rank 0 ready", "gpu-0 ok")
    for line in lines:
        assert as_written(line) == line


def test_a_docker_json_record_is_read_as_what_it_logged_and_a_broken_one_as_written():
    record = (
        '{"log":"RuntimeError: CUDA error: out of memory\\n","stream":"stderr","time":"2026-12-01T12:00:00Z"}'
    )
    assert split_carrier(record) == ("docker json-file stderr: ", "RuntimeError: CUDA error: out of memory")
    cut = '{"log":"RuntimeError: CUDA error: out of mem'  # a record cut by a copy: no JSON, read as written
    assert as_written(cut) == cut
    # an indent that only some lines share is no carrier's: the excerpt's first line is at column 0
    lines = [
        "Traceback (most recent call last):",
        '  File "/x.py", line 1, in f',
        "    g()",
        "ValueError: bad",
    ]
    carried = Diagnoser()
    carried.feed_all(numbered(lines))
    assert [line.text for line in carried._recent][-3:] == lines[1:]


def test_evidence_shows_the_line_with_what_carried_it():
    # Rules read the line as the process wrote it; the reader still sees which container said it.
    line = "sglang-prefill-1  | [2026-12-01 12:00:00 TP0] RuntimeError: NIXL_ERR_BACKEND: transfer failed"
    diagnosis = diagnose_lines(numbered([line]))
    assert diagnosis.cause == "kv_transfer"
    assert diagnosis.to_json()["evidence"][0]["text"] == line
    assert f"log:1: {line}" in diagnosis.render()


def ipython_traceback(lines: list[str]) -> list[str]:
    """A log with its Python tracebacks as IPython prints them: each frame as "File path:N, in f(...)",
    the line it ran as "---> N code" after a numbered context line."""
    out: list[str] = []
    frame_line_no: int | None = None
    for line in lines:
        frame = PYTHON_FRAME_RE.match(line)
        if frame is not None:
            out.append(ipython_frame(line))
            frame_line_no = int(frame[3])
            continue
        # (a source line is indented under its frame; an exception line right under a frame is not one)
        source = line[:1].isspace() and line.strip() and not line.lstrip().startswith("^")
        if frame_line_no is not None and source:
            out.append(f"{frame_line_no - 1:>7}     # (the line before)")
            out.append(f"---> {frame_line_no} {line.strip()}")
        else:
            out.append(line)
        frame_line_no = None
    return out


def test_a_traceback_printed_by_ipython_with_its_source_lines_gets_the_same_answer(as_written_answers):
    # A notebook's traceback numbers the lines around the one each frame ran and marks that one with an
    # arrow: the arrow's line is the frame's source line (a call read for the phase), the others are context.
    changed, converted = [], 0
    for item in TRAIN:
        if not any(PYTHON_FRAME_RE.match(line) for line in item.lines):
            continue
        converted += 1
        got = answer(ipython_traceback(item.lines))
        if got != as_written_answers[item.name]:
            changed.append(f"{item.name}: {as_written_answers[item.name]} as written, {got} from IPython")
    assert converted > 200
    assert not changed, "\n".join(changed)
