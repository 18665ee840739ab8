import re
from pathlib import Path

import pytest
import yaml

from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.diagnosis.rulebook import (
    CAUSES,
    RuleError,
    load_rules,
    parse_rule,
    parse_rules,
    required_literal,
)
from sglnode.pins import PINS

RULES = load_rules()
POSITIVES = [(rule, example) for rule in RULES for example in rule.examples]
NEGATIVES = [(rule, example) for rule in RULES for example in rule.negative_examples]


def _id(value):
    return getattr(value, "id", str(value)[:50])


@pytest.mark.parametrize(("rule", "line"), POSITIVES, ids=_id)
def test_rule_matches_its_positive_example(rule, line):
    assert rule.matches(line)


@pytest.mark.parametrize(("rule", "line"), NEGATIVES, ids=_id)
def test_rule_ignores_its_negative_example(rule, line):
    assert not rule.matches(line)


def test_every_rule_has_positive_and_negative_examples():
    for rule in RULES:
        assert rule.examples, rule.id
        assert rule.negative_examples, rule.id


CUDA_RUNTIME = Path("/usr/local/cuda/lib64/libcudart.so")
# Secondary: it reports that an earlier error broke the capture, and that earlier error is the cause.
SECONDARY_CAPTURE_ERRORS = {"operation failed due to a previous error during capture"}


@pytest.mark.skipif(not CUDA_RUNTIME.exists(), reason="no CUDA toolkit at /usr/local/cuda")
def test_capture_rule_knows_every_stream_capture_error_of_the_cuda_runtime():
    # cudaGetErrorString's texts live in libcudart: every capture error it can print is one rule's words.
    texts = {
        text.decode()
        for text in re.findall(rb"[a-z][a-z -]{20,}", CUDA_RUNTIME.read_bytes())
        if re.search(rb"captur", text) and b" " in text
    }
    capture_errors = texts - SECONDARY_CAPTURE_ERRORS
    assert len(capture_errors) >= 6, sorted(texts)
    rule = next(rule for rule in RULES if rule.id == "capture-illegal-operation")
    assert [text for text in sorted(capture_errors) if not rule.matches(text)] == []


def test_every_cause_except_unknown_has_a_rule():
    covered = {rule.cause for rule in RULES}
    assert covered == set(CAUSES) - {"unknown"}


def test_no_oom_rule_matches_sglang_graph_capture_advice():
    advice = [
        "Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    ]
    oom_rules = [rule for rule in RULES if rule.cause == "oom"]
    assert oom_rules
    for line in advice:
        assert not any(rule.matches(line) for rule in oom_rules), line


def test_only_exit_code_minus_nine_suggests_the_oom_killer():
    sigkill = next(rule for rule in RULES if rule.id == "scheduler-sigkill")
    for code in ("1", "-11", "255", "-3", "-99"):
        assert not sigkill.matches(f"Exit code: {code}")
    assert sigkill.matches("Exit code: -9")
    assert sigkill.confidence == "low"


def test_rules_are_sorted_by_priority():
    priorities = [rule.priority for rule in RULES]
    assert priorities == sorted(priorities, reverse=True)


def test_oom_outranks_the_failures_an_oom_causes():
    priority = {rule.cause: rule.priority for rule in sorted(RULES, key=lambda rule: rule.priority)}
    for consequence in ("nccl", "cuda_graph_capture", "watchdog_timeout", "kv_transfer"):
        assert priority["oom"] > priority[consequence]


def test_phase_fixes_replace_the_generic_fix_for_their_phase():
    rule = next(rule for rule in RULES if rule.id == "oom-cuda-alloc")
    assert "--cuda-graph-max-bs-decode" in rule.fix_for("cuda_graph")
    assert "--tp-size" in rule.fix_for("weights")
    assert rule.fix_for(None) == rule.fix


GOOD = {
    "id": "x",
    "cause": "nccl",
    "priority": 1,
    "conclusive": True,
    "confidence": "high",
    "evidence": "an NCCL line",
    "patterns": ["NCCL"],
    "fix": "f",
    "source": "https://example.org/1",
    "examples": ["NCCL"],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cause": "gremlins"}, "cause"),
        ({"phase": "weights"}, "only oom rules"),
        ({"cause": "oom", "phase": "later"}, "phase"),
        ({"patterns": ["("]}, "bad regex"),
        ({"patterns": []}, "non-empty"),
        ({"confidence": "sure"}, "confidence"),
        ({"source": "http://insecure"}, "https"),
        ({"cause": "oom", "phase_fixes": {"tomorrow": "x"}}, "phase_fixes"),
        ({"yields_to": ["gremlins"]}, "yields_to"),
        ({"yields_to": "arch_unsupported"}, "yields_to"),
        ({"during": ["capture"]}, "during"),
        ({"during": []}, "during"),
        ({"conclusive": False, "needs_failure_after": "yes"}, "true or false"),
        ({"needs_failure_after": True}, "cannot be conclusive"),
        ({"conclusive": False, "reads_info_lines": True}, "needs a failure after"),
    ],
)
def test_malformed_rules_fail_at_load_time(change, message):
    with pytest.raises(RuleError, match=message):
        parse_rule({**GOOD, **change})


def test_a_flag_refusal_that_speaks_of_an_architecture_or_a_block_limit_is_theirs():
    # the arguments rule matches all three (a ValueError naming --flag); its yields_to hands the first
    # two to the family whose words they use, and a PD flag's refusal stays an argument's
    flags = next(rule for rule in RULES if rule.id == "invalid-arguments-named-setting")
    arch = "ValueError: --kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU for the FA4 MXFP8 path."
    smem = "ValueError: --moe-runner-backend cutlass needs 232448 bytes of shared memory per block"
    pd_flag = "ValueError: Invalid IB devices specified for --disaggregation-ib-device: mlx5_9"
    lines = {arch: "arch_unsupported", smem: "kernel_resources", pd_flag: "invalid_arguments"}
    assert all(flags.matches(line) for line in lines)
    assert {line: diagnose_lines(numbered([line])).cause for line in lines} == lines


def test_custom_all_reduce_failing_during_capture_is_the_captures_not_the_transports():
    # the same line: a transport failure at start-up, a capture's when the rank's last marker is a
    # capture's (its graph buffers are registered when the capture ends), a transport's again once serving
    failure = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'"
    capturing = "Capturing CUDA graphs (FULL): 100%|##########| 2/2 [00:00<00:00, 6.11it/s]"
    served = "INFO 09-10 09:40:00 [loggers.py:123] Avg prompt throughput: 10.0 tokens/s, Running: 1 reqs"
    assert diagnose_lines(numbered([failure])).cause == "nccl"
    assert diagnose_lines(numbered([capturing, failure])).rule_id == "custom-all-reduce-during-capture"
    assert diagnose_lines(numbered([capturing, served, failure])).cause == "nccl"


def test_an_error_that_ends_on_what_the_program_uses_instead_is_a_fallback_not_the_failure():
    went_on = (
        "Error running sage attention: SM89 kernel is not available. Make sure you GPUs with compute"
        " capability 8.9., using pytorch attention instead."
    )
    advice = (
        "ValueError: CUTLASS FMHA requires SM100a or SM110a. SM12x lacks tcgen05 MMA."
        " Use backend='fa2' instead."
    )
    assert diagnose_lines(numbered([went_on])).cause == "unknown"
    assert diagnose_lines(numbered([advice])).cause == "arch_unsupported"
    assert diagnose_lines(numbered([went_on, advice])).cause == "arch_unsupported"


def test_unknown_rule_keys_are_rejected():
    with pytest.raises(RuleError, match="unknown keys"):
        parse_rule({**GOOD, "prioritty": 3})


def test_missing_keys_and_duplicate_ids_are_rejected():
    incomplete = {key: value for key, value in GOOD.items() if key != "fix"}
    with pytest.raises(RuleError, match="missing"):
        parse_rule(incomplete)
    with pytest.raises(RuleError, match="duplicate"):
        parse_rules([{"rules": [GOOD, GOOD]}])


# The launch flags of the pinned SGLang, dumped from its own argparse parser (owned by the topology tools).
FLAGS_FILE = Path(__file__).parents[1] / "sglnode" / "topology" / "sglang_flags.yaml"
FLAG_RE = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*[a-z0-9]")


def _fix_texts():
    for rule in RULES:
        yield rule.id, rule.fix
        for phase, text in rule.phase_fixes.items():
            yield f"{rule.id}[{phase}]", text


@pytest.mark.skipif(not FLAGS_FILE.exists(), reason="flag list not present")
def test_every_flag_a_fix_recommends_exists_in_the_pinned_sglang():
    data = yaml.safe_load(FLAGS_FILE.read_text(encoding="utf-8"))
    assert data["sglang_version"] == PINS.sglang  # regenerate sglang_flags.yaml after a bump
    live = {flag for flag, spec in data["flags"].items() if not spec.get("deprecated")}
    for spec in data["flags"].values():
        live.update(alias for alias in spec.get("aliases", []))
    removed_or_deprecated = set(data.get("removed", {})) | {
        flag for flag, spec in data["flags"].items() if spec.get("deprecated")
    }
    for rule_id, text in _fix_texts():
        # Sentences naming what the pinned release removed are allowed in parentheses
        # ("(the pinned release removed ...)").
        recommended = FLAG_RE.findall(re.sub(r"\([^)]*pinned release[^)]*\)", "", text, flags=re.IGNORECASE))
        for flag in recommended:
            assert flag in live, f"{rule_id}: {flag} is not a live flag of SGLang {PINS.sglang}"
            assert flag not in removed_or_deprecated, f"{rule_id}: {flag}"


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"foo\.bar baz", "foo.bar baz"),
        (r"abc(?:de|fg)hijk", "hijk"),
        (r"ab|cdef", None),
        (r"abcd?efgh", "efgh"),
        (r"x{2,3}yyyy", "yyyy"),
        (r"xa+bcd", "abcd"),
        (r"\[sgl_kernel\] CRITICAL", "[sgl_kernel] CRITICAL"),
        (r"[Aa]ddress already in use", "ddress already in use"),
        (r"exit code -9\b", "exit code -9"),
        (r"\d+", None),
    ],
)
def test_required_literal_is_conservative(pattern, literal):
    assert required_literal(pattern) == literal


def test_prefilter_literal_is_in_every_line_its_pattern_matches():
    lines = [line for rule in RULES for line in (*rule.examples, *rule.negative_examples)]
    for rule in RULES:
        for pattern, literal in zip(rule.patterns, rule.literals, strict=True):
            for line in lines:
                if pattern.search(line) and literal is not None:
                    assert literal in line, (rule.id, pattern.pattern)


def test_most_patterns_have_a_prefilter_literal():
    literals = [literal for rule in RULES for literal in rule.literals]
    assert sum(literal is None for literal in literals) == 0
