"""Load and validate the failure rules (`diagnosis/rules/*.yaml`, one file per failure family) and
the phase evidence (`diagnosis/phases.yaml`).

Rules are data so a new failure signature is a YAML edit plus its examples, not a code change.
Each rule: id, cause, phase, priority, conclusive, confidence, evidence, patterns, fix, source,
examples, negative_examples, upstream (see rules/README.md). Validation fails loudly at load time:
a typo in a rule must break the test suite, not silently stop matching on a node.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from sglnode.upstream import catalog

CAUSES: tuple[str, ...] = (
    "oom",
    "host_oom",
    "nccl",
    "arch_unsupported",
    "port_in_use",
    "watchdog_timeout",
    "import_error",
    "cuda_graph_capture",
    "kernel_resources",
    "kv_transfer",
    "invalid_arguments",
    "unknown",
)
OOM_PHASES: tuple[str, ...] = ("weights", "kv_cache", "cuda_graph", "runtime")
# A rule's phase is fixed, inferred from where the log was ("from_context"), or absent.
RULE_PHASES: tuple[str, ...] = (*OOM_PHASES, "from_context")
# The startup stages a log's markers name (phases.yaml markers), in startup order.
MARKER_STAGES = ("weights", "kv_cache", "cuda_graph", "serving")
CONFIDENCES: tuple[str, ...] = ("high", "medium", "low")
OPTIONAL_KEYS = frozenset(
    {
        "phase",
        "phase_fixes",
        "negative_examples",
        "upstream",
        "yields_to",
        "during",
        "needs_failure_after",
        "reads_info_lines",
    }
)
REQUIRED_KEYS = frozenset(
    {
        "id",
        "cause",
        "priority",
        "conclusive",
        "confidence",
        "evidence",
        "patterns",
        "fix",
        "source",
        "examples",
    }
)


class RuleError(ValueError):
    """A rule file is malformed."""


@dataclass(frozen=True)
class Rule:
    """One failure signature."""

    id: str
    cause: str
    phase: str | None
    priority: int
    conclusive: bool
    confidence: str
    evidence: str  # what the rule needs to see, in words (shown with the diagnosis)
    patterns: tuple[re.Pattern[str], ...]
    fix: str
    phase_fixes: dict[str, str]
    source: str
    examples: tuple[str, ...]
    negative_examples: tuple[str, ...]
    literals: tuple[str | None, ...] = ()
    # Upstream messages (catalogue ids, with values to render them) this rule must recognise.
    upstream: tuple[tuple[str, dict[str, Any]], ...] = ()
    # Families whose words (vocabulary.yaml) take a line this rule matches: a check that names the
    # flag it refuses is an architecture's or a resource limit's when it speaks of those.
    yields_to: frozenset[str] = frozenset()
    # Startup stages (MARKER_STAGES) the rule holds in: the crashing rank's last marker must be one. A
    # collective failing while CUDA graphs are captured is the capture's failure, not the transport's.
    during: frozenset[str] = frozenset()
    # A warning the program can recover from (the caching allocator frees its cache and retries): the
    # line counts only once the log shows a failure after it (an exception, a traceback, a kill).
    needs_failure_after: bool = False
    # An engine's INFO-level report of a number that is itself the failure (vLLM's "Available KV cache
    # memory: -2.77 GiB"): the level does not make the line a narration. Only with needs_failure_after.
    reads_info_lines: bool = False

    def matches(self, line: str) -> bool:
        # A substring test first: most lines of a serving log contain none of the literals, and
        # `in` is ~50x cheaper than a regex search (offline logs run to millions of lines).
        for pattern, literal in zip(self.patterns, self.literals, strict=True):
            if (literal is None or literal in line) and pattern.search(line):
                return True
        return False

    def fix_for(self, phase: str | None) -> str:
        """The phase-specific fix where the rule has one, else the general fix."""
        return self.phase_fixes.get(phase, self.fix) if phase else self.fix


MIN_PREFILTER_LITERAL = 4
_REGEX_SPECIAL = set(".^$*+?{}[]|()")


def required_literal(pattern: str) -> str | None:
    """The longest plain-text run every match of `pattern` must contain, or None.

    Deliberately conservative: only text outside groups and classes counts, a top-level `|` gives
    up, a quantifier that allows zero repeats drops the character before it, and any escape other
    than escaped punctuation ends the run.
    """
    runs: list[str] = []
    current = ""
    depth = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "\\" and index < len(pattern):
            escaped = pattern[index]
            index += 1
            if depth == 0 and not escaped.isalnum():
                current += escaped
            else:
                runs.append(current)
                current = ""
        elif char == "[":  # a character class: skip it whole
            runs.append(current)
            current = ""
            close = pattern.find("]", index + 1)
            index = close + 1 if close >= 0 else len(pattern)
        elif char == "(":
            runs.append(current)
            current = ""
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth > 0:
            continue
        elif char == "|":
            return None
        elif char in "?*{":  # zero repeats allowed: the previous character is not required
            runs.append(current[:-1])
            current = ""
            if char == "{":
                close = pattern.find("}", index)
                index = close + 1 if close >= 0 else len(pattern)
        elif char == "+":  # at least one: the last repeat still touches what follows
            runs.append(current)
            current = current[-1:]
        elif char in _REGEX_SPECIAL:
            runs.append(current)
            current = ""
        else:
            current += char
    runs.append(current)
    longest = max(runs, key=len)
    return longest if len(longest) >= MIN_PREFILTER_LITERAL else None


def _compile(rule_id: str, patterns: Any) -> tuple[re.Pattern[str], ...]:
    if not isinstance(patterns, list) or not patterns:
        raise RuleError(f"rule {rule_id}: patterns must be a non-empty list")
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise RuleError(f"rule {rule_id}: bad regex {pattern!r}: {exc}") from exc
    return tuple(compiled)


def _upstream(rule_id: str, raw: Any) -> tuple[tuple[str, dict[str, Any]], ...]:
    """`upstream:` entries: a catalogue id, or {id, values} to render it with particular values."""
    entries = []
    known = catalog.load()
    for item in raw or ():
        entry_id, values = (item, {}) if isinstance(item, str) else (item.get("id"), item.get("values") or {})
        if entry_id not in known:
            raise RuleError(f"rule {rule_id}: upstream {entry_id!r} is not in the upstream catalogue")
        entries.append((str(entry_id), dict(values)))
    return tuple(entries)


def parse_rule(raw: dict[str, Any]) -> Rule:
    """Turn one YAML mapping into a Rule, rejecting anything the diagnosis could not use."""
    missing = REQUIRED_KEYS - raw.keys()
    rule_id = str(raw.get("id", "?"))
    if missing:
        raise RuleError(f"rule {rule_id}: missing keys {sorted(missing)}")
    unknown = raw.keys() - REQUIRED_KEYS - OPTIONAL_KEYS
    if unknown:
        raise RuleError(f"rule {rule_id}: unknown keys {sorted(unknown)}")
    if raw["cause"] not in CAUSES:
        raise RuleError(f"rule {rule_id}: cause {raw['cause']!r} not one of {CAUSES}")
    phase = raw.get("phase")
    if phase is not None and phase not in RULE_PHASES:
        raise RuleError(f"rule {rule_id}: phase {phase!r} not one of {RULE_PHASES}")
    if phase is not None and raw["cause"] != "oom":
        raise RuleError(f"rule {rule_id}: only oom rules carry a phase")
    if raw["confidence"] not in CONFIDENCES:
        raise RuleError(f"rule {rule_id}: confidence {raw['confidence']!r} not one of {CONFIDENCES}")
    phase_fixes = raw.get("phase_fixes") or {}
    if not isinstance(phase_fixes, dict) or not set(phase_fixes) <= set(OOM_PHASES):
        raise RuleError(f"rule {rule_id}: phase_fixes keys must be among {OOM_PHASES}")
    if not str(raw["source"]).startswith("https://"):
        raise RuleError(f"rule {rule_id}: source must be an https URL")
    if raw.get("needs_failure_after") and raw["conclusive"]:
        raise RuleError(f"rule {rule_id}: a rule that needs a failure after its line cannot be conclusive")
    if raw.get("reads_info_lines") and not raw.get("needs_failure_after"):
        raise RuleError(f"rule {rule_id}: a rule that reads INFO lines needs a failure after its line")
    return Rule(
        upstream=_upstream(rule_id, raw.get("upstream")),
        id=rule_id,
        cause=raw["cause"],
        phase=phase,
        priority=int(raw["priority"]),
        conclusive=bool(raw["conclusive"]),
        confidence=raw["confidence"],
        evidence=" ".join(str(raw["evidence"]).split()),
        patterns=_compile(rule_id, raw["patterns"]),
        fix=" ".join(str(raw["fix"]).split()),
        phase_fixes={phase: " ".join(str(text).split()) for phase, text in phase_fixes.items()},
        source=str(raw["source"]),
        examples=tuple(raw["examples"]),
        negative_examples=tuple(raw.get("negative_examples") or ()),
        literals=tuple(required_literal(pattern) for pattern in raw["patterns"]),
        yields_to=frozenset(_causes(rule_id, raw.get("yields_to") or [])),
        during=_stages(rule_id, raw.get("during")),
        needs_failure_after=_flag(rule_id, "needs_failure_after", raw.get("needs_failure_after", False)),
        reads_info_lines=_flag(rule_id, "reads_info_lines", raw.get("reads_info_lines", False)),
    )


def _flag(rule_id: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RuleError(f"rule {rule_id}: {key} must be true or false")
    return value


def _stages(rule_id: str, stages: Any) -> frozenset[str]:
    if stages is None:
        return frozenset()
    if not isinstance(stages, list) or not stages or not set(stages) <= set(MARKER_STAGES):
        raise RuleError(f"rule {rule_id}: during must list stages among {MARKER_STAGES}")
    return frozenset(stages)


def _causes(rule_id: str, causes: Any) -> list[str]:
    if not isinstance(causes, list) or not set(causes) <= set(CAUSES):
        raise RuleError(f"rule {rule_id}: yields_to must list causes among {CAUSES}")
    return causes


def parse_rules(documents: list[dict[str, Any]]) -> tuple[Rule, ...]:
    rules = [parse_rule(raw) for document in documents for raw in document.get("rules", [])]
    ids = [rule.id for rule in rules]
    duplicates = sorted({rule_id for rule_id in ids if ids.count(rule_id) > 1})
    if duplicates:
        raise RuleError(f"duplicate rule ids: {duplicates}")
    # Highest priority first, so the first match while scanning is the strongest.
    return tuple(sorted(rules, key=lambda rule: -rule.priority))


@cache
def load_rules() -> tuple[Rule, ...]:
    """All rules shipped in the package, highest priority first."""
    folder = resources.files("sglnode.diagnosis") / "rules"
    documents = [
        yaml.safe_load(entry.read_text(encoding="utf-8"))
        for entry in sorted(folder.iterdir(), key=lambda item: item.name)
        if entry.name.endswith(".yaml")
    ]
    return parse_rules(documents)


@dataclass(frozen=True)
class PhaseEvidence:
    """Where a process died: traceback-frame hints per OOM phase and startup-stage markers."""

    frames: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]  # (phase, patterns)
    markers: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]  # (stage, patterns)
    forward: tuple[re.Pattern[str], ...] = ()  # frames of a forward pass: runtime when nothing else says
    forward_phase: str = "runtime"
    requests: tuple[re.Pattern[str], ...] = ()  # the serving markers that are requests being answered
    # an allocator's message stating the size asked and the GPU's total (named groups ask, ask_unit,
    # total, total_unit): an ask larger than the GPU is no weight shard
    oversized: tuple[re.Pattern[str], ...] = ()
    oversized_phase: str = "kv_cache"
    # phase frames that span several stages (an engine's whole constructor, a warm-up that sizes the KV
    # cache and then captures graphs): they place an OOM only when no other phase frame lies inside them
    containers: tuple[re.Pattern[str], ...] = ()
    # phase frames an engine runs at start-up and again per request (ggml's graph allocator reserves more
    # when a batch's graph needs it): a request in flight before the OOM decides over them
    per_request: tuple[re.Pattern[str], ...] = ()

    def is_container_frame(self, line: str) -> bool:
        return any(pattern.search(line) for pattern in self.containers)

    def is_per_request_frame(self, line: str) -> bool:
        return any(pattern.search(line) for pattern in self.per_request)

    def asks_more_than_gpu(self, line: str) -> bool:
        """The allocation that failed asked for more than the whole GPU holds."""
        for pattern in self.oversized:
            found = pattern.search(line)
            if found is None:
                continue
            groups = found.groupdict()
            if groups.get("ask") is None:  # a message that states it without numbers ("more than 1EB")
                return True
            asked = float(groups["ask"]) * _BINARY_UNITS[groups["ask_unit"]]
            total = float(groups["total"]) * _BINARY_UNITS[groups["total_unit"]]
            return asked > total
        return False

    def is_request_line(self, line: str) -> bool:
        return any(pattern.search(line) for pattern in self.requests)

    def is_forward_frame(self, line: str) -> bool:
        return any(pattern.search(line) for pattern in self.forward)

    def frame_phase(self, line: str) -> str | None:
        for phase, patterns in self.frames:
            if any(pattern.search(line) for pattern in patterns):
                return phase
        return None

    def marker_stage(self, line: str) -> str | None:
        for stage, patterns in self.markers:
            if any(pattern.search(line) for pattern in patterns):
                return stage
        return None


_BINARY_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}


def _oversized_patterns(entry: dict[str, Any]) -> tuple[re.Pattern[str], ...]:
    patterns = _compile("oversized", entry.get("patterns"))
    for pattern in patterns:
        names = set(pattern.groupindex)
        if names and names != {"ask", "ask_unit", "total", "total_unit"}:
            raise RuleError(
                f"phases.yaml: oversized pattern {pattern.pattern!r} "
                "must name ask, ask_unit, total, total_unit"
            )
    return patterns


def parse_phase_evidence(data: dict[str, Any]) -> PhaseEvidence:
    frames = []
    for entry in data.get("frames") or []:
        if entry.get("phase") not in OOM_PHASES:
            raise RuleError(f"phases.yaml: frame phase {entry.get('phase')!r} not one of {OOM_PHASES}")
        frames.append((entry["phase"], _compile(f"frames:{entry['phase']}", entry.get("patterns"))))
    markers = []
    requests: list[re.Pattern[str]] = []
    for entry in data.get("markers") or []:
        if entry.get("stage") not in MARKER_STAGES:
            raise RuleError(f"phases.yaml: marker stage {entry.get('stage')!r} not one of {MARKER_STAGES}")
        if entry.get("requests") and entry["stage"] != "serving":
            raise RuleError(f"phases.yaml: requests marks serving markers only, not {entry['stage']!r}")
        patterns = _compile(f"markers:{entry['stage']}", entry.get("patterns"))
        markers.append((entry["stage"], patterns))
        if entry.get("requests"):
            requests.extend(patterns)
    forward = data.get("forward") or {}
    if forward and forward.get("phase") not in OOM_PHASES:
        raise RuleError(f"phases.yaml: forward phase {forward.get('phase')!r} not one of {OOM_PHASES}")
    oversized = data.get("oversized") or {}
    if oversized and oversized.get("phase") not in OOM_PHASES:
        raise RuleError(f"phases.yaml: oversized phase {oversized.get('phase')!r} not one of {OOM_PHASES}")
    return PhaseEvidence(
        tuple(frames),
        tuple(markers),
        _compile("forward", forward.get("patterns")) if forward else (),
        forward.get("phase", "runtime"),
        tuple(requests),
        _oversized_patterns(oversized) if oversized else (),
        oversized.get("phase", "kv_cache"),
        _compile("containers", data.get("containers")) if data.get("containers") else (),
        _compile("per_request", data.get("per_request")) if data.get("per_request") else (),
    )


@cache
def load_phase_evidence() -> PhaseEvidence:
    text = (resources.files("sglnode.diagnosis") / "phases.yaml").read_text(encoding="utf-8")
    return parse_phase_evidence(yaml.safe_load(text))


@dataclass(frozen=True)
class LogLineLike:
    """A bare line for classify() callers without line numbers (tests, one-off checks)."""

    text: str


@dataclass(frozen=True)
class VocabularyFamily:
    """One failure family's own words (vocabulary.yaml): the fallback when no rule matched."""

    cause: str
    evidence: str
    fix: str
    words: re.Pattern[str]
    examples: tuple[str, ...]
    negative_examples: tuple[str, ...]
    # Where the family's code lives (traceback frame paths): SGLang's disaggregation package, NIXL and
    # Mooncake for KV transfer; the last resort when no error line uses any family's words.
    code: re.Pattern[str] | None = None


@dataclass(frozen=True)
class Vocabulary:
    error_line: re.Pattern[str]
    families: tuple[VocabularyFamily, ...]  # precedence order: the first wins a tie
    abstain: re.Pattern[str]  # CUDA faults: the log names no cause, no family is claimed
    abstain_note: str
    benign: re.Pattern[str]  # error-looking routine lines

    def fault(self, error_lines: list[Any]) -> str | None:
        for line in error_lines:
            found = self.abstain.search(line.text)
            if found:
                return found.group(0)
        return None

    def code_family(self, frame: str) -> VocabularyFamily | None:
        """The family whose code a traceback frame is in, if any (precedence order)."""
        for family in self.families:
            if family.code is not None and family.code.search(frame):
                return family
        return None

    def family(self, cause: str) -> VocabularyFamily:
        return next(family for family in self.families if family.cause == cause)

    def is_error_line(self, line: str) -> bool:
        return self.error_line.search(line) is not None and self.benign.search(line) is None

    def classify(
        self, error_lines: list[Any], first: Callable[[Any], frozenset[str]] | None = None
    ) -> tuple[VocabularyFamily, list[Any]] | None:
        """The family whose words most error lines use (ties: precedence), with those lines.

        A line speaks for one family only, the most specific one (precedence order) whose words it
        uses: NCCL's "Watchdog caught collective operation timeout" is an NCCL line, not also a
        watchdog one, and a Mooncake transfer error that says "timed out" is a KV-transfer line.
        `first(line)` names families asked before the others for that line (those a rule yielded it to).
        """
        by_family: dict[str, list[Any]] = {}
        for line in error_lines:
            preferred = first(line) if first is not None else frozenset()
            ordered = [family for family in self.families if family.cause in preferred]
            for family in (*ordered, *self.families):
                if family.words.search(line.text):
                    by_family.setdefault(family.cause, []).append(line)
                    break
        best: tuple[VocabularyFamily, list[Any]] | None = None
        for family in self.families:
            lines = by_family.get(family.cause, [])
            if lines and (best is None or len(lines) > len(best[1])):
                best = (family, lines)
        return best


VOCABULARY_KEYS = frozenset({"cause", "evidence", "fix", "words", "examples", "negative_examples", "code"})
# A traceback's frame line ("File ..., line N, in f", after any log prefix); the source line under it.
FRAME_RE = re.compile(r'File "[^"]+", line \d+')


def parse_vocabulary(data: dict[str, Any]) -> Vocabulary:
    try:
        raw_error_line = data["error_line"]
        if isinstance(raw_error_line, list):  # alternatives, one a line
            raw_error_line = "|".join(f"(?:{alternative})" for alternative in raw_error_line)
        error_line = re.compile(str(raw_error_line).strip(), re.IGNORECASE)
    except (KeyError, re.error) as exc:
        raise RuleError(f"vocabulary.yaml: error_line: {exc}") from exc
    families = []
    for raw in data.get("families") or []:
        cause = raw.get("cause")
        if cause not in CAUSES or cause in ("oom", "unknown"):
            # GPU OOM is only ever diagnosed from an explicit signature, never from words.
            raise RuleError(f"vocabulary.yaml: family cause {cause!r} not allowed")
        unknown = raw.keys() - VOCABULARY_KEYS
        missing = VOCABULARY_KEYS - {"negative_examples", "code"} - raw.keys()
        if unknown or missing:
            raise RuleError(
                f"vocabulary.yaml {cause}: unknown keys {sorted(unknown)}, missing {sorted(missing)}"
            )
        try:
            words = re.compile("|".join(f"(?:{w})" for w in raw["words"]), re.IGNORECASE)
            code = re.compile("|".join(f"(?:{w})" for w in raw["code"])) if raw.get("code") else None
        except re.error as exc:
            raise RuleError(f"vocabulary.yaml {cause}: {exc}") from exc
        families.append(
            VocabularyFamily(
                cause=cause,
                evidence=" ".join(str(raw["evidence"]).split()),
                fix=" ".join(str(raw["fix"]).split()),
                words=words,
                examples=tuple(raw["examples"]),
                negative_examples=tuple(raw.get("negative_examples") or ()),
                code=code,
            )
        )
    try:
        abstain = re.compile("|".join(f"(?:{w})" for w in data.get("abstain") or ["(?!)"]), re.IGNORECASE)
    except re.error as exc:
        raise RuleError(f"vocabulary.yaml abstain: {exc}") from exc
    note = " ".join(str(data.get("abstain_note") or "A CUDA fault ({fault}) ended the run.").split())
    try:
        benign = re.compile("|".join(f"(?:{w})" for w in data.get("benign") or ["(?!)"]))
    except re.error as exc:
        raise RuleError(f"vocabulary.yaml benign: {exc}") from exc
    return Vocabulary(error_line, tuple(families), abstain, note, benign)


@cache
def load_vocabulary() -> Vocabulary:
    text = (resources.files("sglnode.diagnosis") / "vocabulary.yaml").read_text(encoding="utf-8")
    return parse_vocabulary(yaml.safe_load(text))
