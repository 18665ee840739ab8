"""Synthetic prompts, one per request of the whole run, built on demand: no pool, no tokenizer.

A prefix cache (SGLang's radix tree, the router's cache_aware policy) turns a repeated prompt into
a cache hit, and a run of hits measures the cache, not prefill. So every request of a run (warm-up,
every stage, every worker) gets its own prompt, derived from (seed, request number) alone, where
the request number is the stage's base plus the request's index in it (`request_number`).

Token-id prompts mirror SGLang's `random-ids` dataset (the pinned sglang,
python/sglang/benchmark/datasets/random.py, `sample_random_requests` with random_sample=False):
prompt i is `(offset_i + i + j) % vocab_size` for j in range(input_len), consecutive ids from a
random start, of exactly the requested length. Here the ids live in [TOKEN_ID_LOW, TOKEN_ID_HIGH)
(no tokenizer, so no vocab size: every vocabulary we serve has more ids than that), and the start is
a bijection of the request number instead of a random offset, so two requests of a run never start
with the same token (upstream's random offsets collide now and then): a radix tree, which matches
from the first token on, finds no common prefix. Past ID_RANGE requests the first token repeats; the
second then differs, so two requests share at most one token.

`--workload shared-prefix` prepends one of `prefix_groups` fixed prefixes of `prefix_len` tokens
(request n uses group n % groups) to a distinct suffix, the input for cache_aware routing and
radix-cache tests (upstream's `generated-shared-prefix` dataset, with token ids instead of text).

Chat prompts are text: the request number, then common English words (about one token each), of
`input_len` words; the server's usage.prompt_tokens reports the real length.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Literal

# Token ids drawn from this range exist in every vocabulary of the models we serve (>= 32k
# entries) and sit above the special/control tokens that vocabularies put at the start.
TOKEN_ID_LOW = 1000
TOKEN_ID_HIGH = 20000
ID_RANGE = TOKEN_ID_HIGH - TOKEN_ID_LOW
# Start of request n's ids: (n * STRIDE + seed offset) mod ID_RANGE. STRIDE is prime and does not
# divide ID_RANGE (2^3 * 5^3 * 19), so n -> start is a bijection on [0, ID_RANGE).
STRIDE = 7919
# Shared prefixes start elsewhere than the suffixes (any offset works; this one is far from 0).
PREFIX_SALT = 9973
# Seeds map to an offset; a large odd multiplier spreads neighbouring seeds apart.
SEED_MULTIPLIER = 104729

Workload = Literal["random-ids", "shared-prefix"]
WORKLOADS: tuple[Workload, ...] = ("random-ids", "shared-prefix")

# Words that are single tokens in the Llama/Qwen/GPT BPE vocabularies when preceded by a space.
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "which",
    "this",
    "have",
    "are",
    "not",
    "but",
    "had",
    "they",
    "were",
    "one",
    "all",
    "their",
    "has",
    "been",
    "there",
    "would",
    "more",
    "when",
    "who",
    "will",
    "time",
    "can",
    "what",
    "about",
]


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    text: str


@dataclass(frozen=True)
class PromptSpec:
    input_len: int
    seed: int = 0
    workload: Workload = "random-ids"
    prefix_len: int = 0
    prefix_groups: int = 1

    def __post_init__(self) -> None:
        if self.workload == "shared-prefix" and not 0 < self.prefix_len < self.input_len:
            raise ValueError("a shared prefix needs 0 < --prefix-len < --input-len")


def request_number(stage_base: int, index: int) -> int:
    """The run-wide number of a request: its stage's base plus its index in the stage."""
    return stage_base + index


class PromptFactory:
    """Prompt n of a run, deterministic in (spec, n); the only state is a table of id strings."""

    def __init__(self, spec: PromptSpec) -> None:
        self.spec = spec
        self._offset = (spec.seed * SEED_MULTIPLIER) % ID_RANGE
        # "1000", "1001", ... twice over, so a run of consecutive ids is one slice (see _id_run).
        pieces = [str(TOKEN_ID_LOW + k).encode() for k in range(ID_RANGE)]
        self._pieces = pieces + pieces

    def _start(self, n: int) -> int:
        return (n * STRIDE + self._offset) % ID_RANGE

    def _id_run(self, start: int, length: int) -> list[bytes]:
        """`length` consecutive ids from `start` (wrapping in the range), as JSON number strings."""
        out: list[bytes] = []
        pos = start % ID_RANGE
        while length > 0:
            take = min(length, ID_RANGE)
            out += self._pieces[pos : pos + take]
            length -= take
            pos = (pos + take) % ID_RANGE
        return out

    def _distinct(self, n: int, length: int) -> list[bytes]:
        """Request n's own ids: random-ids' consecutive run; the second id also encodes n // ID_RANGE."""
        first = self._start(n % ID_RANGE)
        if length == 1:
            return self._id_run(first, 1)
        second = (first + 1 + n // ID_RANGE) % ID_RANGE
        return self._id_run(first, 1) + self._id_run(second, length - 1)

    def _prefix(self, n: int) -> list[bytes]:
        spec = self.spec
        group = n % spec.prefix_groups
        start = (group * STRIDE + self._offset + PREFIX_SALT) % ID_RANGE
        return self._id_run(start, spec.prefix_len)

    def ids_json(self, n: int) -> bytes:
        """Prompt n as the inside of a JSON list of token ids: b"1234,1235,..." (exact length)."""
        spec = self.spec
        if spec.workload == "shared-prefix":
            pieces = self._prefix(n) + self._distinct(n, spec.input_len - spec.prefix_len)
        else:
            pieces = self._distinct(n, spec.input_len)
        return b",".join(pieces)

    def ids(self, n: int) -> list[int]:
        return [int(piece) for piece in self.ids_json(n).split(b",")]

    def text(self, n: int) -> str:
        """Chat prompt n: shared prefix words (shared-prefix only), the request number, then words."""
        spec = self.spec
        words: list[str] = []
        length = spec.input_len
        if spec.workload == "shared-prefix":
            group = n % spec.prefix_groups
            words += [f"group{group}", *_cycle_words(group * STRIDE + self._offset, spec.prefix_len - 1)]
            length -= spec.prefix_len
        words += [str(n), *_cycle_words(self._start(n % ID_RANGE), length - 1)]
        return " ".join(words)

    def prompt(self, n: int) -> Prompt:
        return Prompt(ids=self.ids(n), text=self.text(n))


def _cycle_words(start: int, count: int) -> list[str]:
    start %= len(_WORDS)
    return list(itertools.islice(itertools.cycle(_WORDS[start:] + _WORDS[:start]), max(count, 0)))


def json_text(text: str) -> bytes:
    return json.dumps(text).encode()


def make_prompts(count: int, input_len: int, seed: int) -> list[Prompt]:
    """The first `count` prompts of a random-ids run (for tests and tools; the bench builds them lazily)."""
    factory = PromptFactory(PromptSpec(input_len=input_len, seed=seed))
    return [factory.prompt(n) for n in range(count)]
