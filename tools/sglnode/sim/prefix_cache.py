"""A radix (prefix) cache model for the simulator: how many prompt tokens an earlier prompt shared.

SGLang keeps the KV of finished prompts in a radix tree and reuses the longest cached prefix of a new
prompt (`cached_tokens` in its responses, `#cached-token` in its prefill log line). The simulator
keeps the tokens of the prompts it has seen in a trie and reports the same figure, so a benchmark
that claims distinct prompts can be checked (no hits), and a shared-prefix workload shows hits.
Simplified on purpose: when the trie reaches its token capacity it is emptied (SGLang evicts the
least recently used leaves), and a text prompt is cut into pieces of CHARS_PER_TOKEN characters.
"""

from __future__ import annotations

from typing import Any

CHARS_PER_TOKEN = 4
# The trie is a dict per node: bounded so a long benchmark cannot grow the simulator without limit.
MAX_CACHED_TOKENS = 1_000_000


def prompt_tokens(prompt: Any) -> tuple[Any, ...]:
    """The prompt as a sequence of token-like keys: ids as given, text in fixed-size pieces."""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return tuple(prompt)
    if isinstance(prompt, list):
        keys: list[Any] = []
        for part in prompt:
            keys.extend(prompt_tokens(part))
        return tuple(keys)
    text = str(prompt or "")
    return tuple(text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


class PrefixCache:
    def __init__(self, capacity_tokens: int = MAX_CACHED_TOKENS) -> None:
        self.capacity = max(1, min(capacity_tokens, MAX_CACHED_TOKENS))
        self.root: dict[Any, dict[Any, Any]] = {}
        self.size = 0  # nodes (tokens) in the trie
        self.hit_tokens_total = 0
        self.flushes = 0

    def match_and_insert(self, tokens: tuple[Any, ...]) -> int:
        """Cached prefix length of `tokens`; then the whole prompt is cached for the next request."""
        node = self.root
        matched = 0
        for token in tokens:
            child = node.get(token)
            if child is None:
                break
            node = child
            matched += 1
        # SGLang never reports the whole prompt as cached: the last token is always computed.
        matched = min(matched, max(len(tokens) - 1, 0))
        if self.size + len(tokens) > self.capacity:
            self.flush(count=False)
            node, start = self.root, 0
        else:
            node, start = self._walk(tokens)
        for token in tokens[start:]:
            node = node.setdefault(token, {})
            self.size += 1
        self.hit_tokens_total += matched
        return matched

    def _walk(self, tokens: tuple[Any, ...]) -> tuple[dict[Any, Any], int]:
        node = self.root
        for depth, token in enumerate(tokens):
            child = node.get(token)
            if child is None:
                return node, depth
            node = child
        return node, len(tokens)

    def flush(self, count: bool = True) -> None:
        self.root = {}
        self.size = 0
        if count:
            self.flushes += 1
