"""Synthetic prompts of a given length, seeded, with no tokenizer.

Token-id prompts (/generate input_ids, /v1/completions prompt list) have exactly the requested
length. Text prompts (chat) are approximate: one common English word per token; the server's
usage.prompt_tokens reports the real length and the summary shows it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Token ids drawn from this range exist in every vocabulary of the models we serve (>= 32k
# entries) and sit above the special/control tokens that vocabularies put at the start.
TOKEN_ID_LOW = 1000
TOKEN_ID_HIGH = 20000

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


def make_prompts(count: int, input_len: int, seed: int) -> list[Prompt]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        ids = [rng.randrange(TOKEN_ID_LOW, TOKEN_ID_HIGH) for _ in range(input_len)]
        text = " ".join(rng.choice(_WORDS) for _ in range(input_len))
        prompts.append(Prompt(ids=ids, text=text))
    return prompts
