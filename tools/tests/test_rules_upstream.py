"""Diagnosis against the pinned SGLang's own fatal messages and log lines (the upstream catalogue).

Every fatal message in the catalogue (extracted from the pinned wheel, checked against it by
test_upstream_strings.py) must be recognised by a rule, and the whole crash, as SGLang prints it
(traceback, scheduler exception, kill), must be diagnosed with the right cause and phase. No routine
log line of the pinned release may look like a failure.
"""

import ast
import re
from collections import Counter

import pytest

from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.diagnosis.rulebook import LogLineLike, load_rules, load_vocabulary
from sglnode.upstream import catalog
from sglnode.upstream.wheels import WheelSource, pinned_wheel

RULES = load_rules()
UPSTREAM = [(rule, entry_id, values) for rule in RULES for entry_id, values in rule.upstream]
# Catalogue "fatal" entries that are advice or fragments, never the failure itself.
NOT_A_FAILURE = {"capture_failed_advice", "prefill_capture_failed_advice", "not_enough_memory_current_value"}
SITE = "/opt/sglang/lib/python3.12/site-packages"
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")


def _id(value):
    return getattr(value, "id", str(value)[:40])


@pytest.mark.parametrize(("rule", "entry_id", "values"), UPSTREAM, ids=_id)
def test_rule_recognises_the_upstream_message_it_claims(rule, entry_id, values):
    text = catalog.sample(catalog.get(entry_id), **values)
    assert any(rule.matches(line) for line in text.splitlines()), text


def test_every_upstream_fatal_message_has_a_rule():
    claimed = {entry_id for _, entry_id, _ in UPSTREAM}
    fatal = {entry.id for entry in catalog.load().values() if entry.kind == "fatal"}
    assert fatal - NOT_A_FAILURE <= claimed, sorted(fatal - NOT_A_FAILURE - claimed)


ROUTINE_VALUES = {
    "kv_pool_full_retract": {},
    "custom_allreduce_pcie_disabled": {"cls_name": "CustomAllreduce"},
}


@pytest.mark.parametrize(
    "entry", [e for e in catalog.load().values() if e.kind == "log" and e.id != "watchdog_timeout"], ids=_id
)
def test_no_routine_0_5_23_line_is_a_conclusive_failure(entry):
    text = catalog.sample(entry, **ROUTINE_VALUES.get(entry.id, {}))
    hits = [
        rule.id for rule in RULES if rule.conclusive and any(rule.matches(line) for line in text.splitlines())
    ]
    oom = [rule.id for rule in RULES if rule.cause == "oom" and rule.matches(text)]
    assert not oom, (entry.id, oom)
    if entry.id not in ("scheduler_exception", "kill_process_tree", "sigquit"):
        assert not hits, (entry.id, hits)


def _crash(error_lines: list[str], frame_entry: str) -> list[str]:
    """A scheduler crash as the pinned SGLang prints it: the exception block, then the teardown."""
    frame = catalog.get(frame_entry)
    scheduler = catalog.get("scheduler_exception")
    head = catalog.sample(scheduler, traceback="Traceback (most recent call last):")
    function = frame.template.function.split(".")[-1]
    traceback = [
        f"[2026-11-29 09:00:01 TP0] {head}",
        f'  File "{SITE}/{scheduler.file}", line {scheduler.template.line}, in run_scheduler_process',
        "    scheduler = Scheduler(",
        f'  File "{SITE}/{frame.file}", line {frame.template.line}, in {function}',
        "    raise",
        *error_lines,
        f"[2026-11-29 09:00:01] {catalog.get('sigquit').text}",
        f"[2026-11-29 09:00:01] {catalog.sample(catalog.get('kill_process_tree'), include_parent=True)}",
    ]
    return traceback


def _startup(until: str) -> list[str]:
    """The pinned release's startup lines up to (and including) a milestone."""
    lines = {
        "weights": [catalog.sample(catalog.get("load_weight_begin"))],
        "kv": [catalog.sample(catalog.get("load_weight_end"), type="DeepseekV4ForCausalLM", quant_str="")],
        "graph": [
            catalog.sample(catalog.get("memory_pool_end")),
            catalog.sample(
                catalog.get("capture_decode_begin"),
                capture_name="target decode",
                graph_backend="CUDA graph",
                decode_backend="full",
            ),
        ],
        "serving": [
            catalog.sample(
                catalog.get("capture_decode_end"),
                capture_name="target decode",
                graph_backend="CUDA graph",
                capture_bs=[1, 2, 4, 8],
            ),
            catalog.sample(catalog.get("max_total_num_tokens"), device="available_gpu_mem"),
        ],
    }
    out = []
    for stage, stage_lines in lines.items():
        out += [f"[2026-11-29 09:00:00 TP0] {line}" for line in stage_lines]
        if stage == until:
            break
    return out


def test_0_5_23_kv_budget_error_is_oom_in_kv_cache():
    message = catalog.get("kv_budget_no_memory").render(
        mem_fraction_static=0.35, suggested_mem_fraction_static=0.388, minimum_mem_fraction_static=0.3879
    )
    log = _startup("kv") + _crash([f"ValueError: {message}"], "kv_budget_no_memory")
    diagnosis = diagnose_lines(numbered(log))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "kv_cache")
    assert diagnosis.rule_id == "oom-kv-budget"
    assert any("Loaded weights leave no GPU memory" in line.text for line in diagnosis.evidence)


def test_0_5_23_capture_failure_with_oom_is_oom_in_cuda_graph():
    failed = catalog.get("capture_failed").render(
        e="CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 95.59 GiB",
        CUDA_GRAPH_CAPTURE_FAILED_MSG=catalog.get("capture_failed_advice").text,
    )
    log = _startup("graph") + _crash(["Exception: " + failed], "capture_failed")
    diagnosis = diagnose_lines(numbered(log))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "cuda_graph")


def test_oom_after_the_0_5_23_graph_end_line_is_runtime():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 95.59 GiB"
    log = _startup("serving") + _crash([oom], "scheduler_event_loop_overlap")
    diagnosis = diagnose_lines(numbered(log))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "runtime")


def test_0_5_23_capture_failure_without_oom_is_a_capture_failure():
    failed = catalog.get("capture_failed").render(
        e="CUDA error: operation not permitted when stream is capturing",
        CUDA_GRAPH_CAPTURE_FAILED_MSG=catalog.get("capture_failed_advice").text,
    )
    log = _startup("graph") + _crash(["Exception: " + failed], "capture_failed")
    diagnosis = diagnose_lines(numbered(log))
    assert diagnosis.cause == "cuda_graph_capture"


def _raised_messages(source_text: str) -> list[tuple[int, str, str]]:
    """(line, exception class, message) of every `raise X("...")` with a literal or f-string message;
    an f-string's fields are rendered as 7 (what they hold does not change which words surround them)."""
    found = []
    for node in ast.walk(ast.parse(source_text)):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        message = node.exc.args[0]
        if isinstance(message, ast.Constant) and isinstance(message.value, str):
            text = message.value
        elif isinstance(message, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "7" for v in message.values)
        else:
            continue
        exc = node.exc.func
        name = exc.id if isinstance(exc, ast.Name) else getattr(exc, "attr", "Exception")
        found.append((node.lineno, name, text.replace("%s", "x").replace("%d", "7")))
    return found


def test_every_error_the_pinned_disaggregation_code_raises_is_diagnosed_never_unknown_or_oom():
    # SGLang's PD code raises its own checks as plain RuntimeError/ValueError ("PD state transfer failed:
    # ...", "State index length mismatch ..."): the traceback through srt/disaggregation/ names the
    # family even where the words do not (vocabulary.yaml `code`).
    vocabulary = load_vocabulary()
    outcomes = Counter()
    wrong = []
    with WheelSource(pinned_wheel("sglang")) as source:
        members = [
            name
            for name in source.names()
            if name.startswith("sglang/srt/disaggregation/") and name.endswith(".py") and "/test" not in name
        ]
        for member in members:
            for line_no, exc, message in _raised_messages(source.read(member)):
                crash = [
                    "Traceback (most recent call last):",
                    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1, in event_loop_disagg_decode',
                    "    self.process_decode_queue()",
                    f'  File "{SITE}/{member}", line {line_no}, in check',
                    f"    raise {exc}(...)",
                    f"{exc}: {message}",
                ]
                diagnosis = diagnose_lines(numbered(crash))
                # A message in another family's own words may be named for it ("... timed out").
                words = vocabulary.classify([LogLineLike(crash[-1])])
                allowed = {"kv_transfer", words[0].cause} if words is not None else {"kv_transfer"}
                # a check that names the flag it refuses ("requires --dp-size > 1") is an argument's
                if FLAG_RE.search(message):
                    allowed.add("invalid_arguments")
                outcomes[diagnosis.cause] += 1
                if diagnosis.cause not in allowed:
                    wrong.append(f"{member}:{line_no} {diagnosis.cause}: {crash[-1][:120]}")
    assert sum(outcomes.values()) >= 200, outcomes  # the package raises hundreds of checks
    assert outcomes["unknown"] == 0 and outcomes["oom"] == 0, wrong
    assert wrong == []
    assert outcomes["kv_transfer"] >= 0.95 * sum(outcomes.values()), outcomes
