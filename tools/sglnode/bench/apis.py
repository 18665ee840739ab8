"""The three streaming APIs the bench drives, as data: path, request body, and the byte markers
the scanner counts in the stream.

Request fields are SGLang's (sgl-project/sglang v0.5.x):
  /generate             GenerateReqInput: input_ids | text, sampling_params{max_new_tokens, ignore_eos,
                        temperature}, stream; each streamed event carries meta_info.completion_tokens
                        (cumulative) and meta_info.prompt_tokens (python/sglang/srt/managers/io_struct.py).
  /v1/completions       CompletionRequest: prompt (str | list[int]), max_tokens, ignore_eos (an SRT
                        extension), stream_options{include_usage, continuous_usage_stats}
                        (python/sglang/srt/entrypoints/openai/protocol.py, class StreamOptions).
  /v1/chat/completions  ChatCompletionRequest: messages, same extensions.
With continuous_usage_stats every chunk carries the cumulative usage, so tokens per chunk are exact
even when one chunk holds several tokens (speculative decoding); without it they are counted from
the chunks that arrived (docs/bench.md, "Token counts").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

ApiName = Literal["generate", "completions", "chat"]
API_NAMES: tuple[ApiName, ...] = ("generate", "completions", "chat")


@dataclass(frozen=True)
class StreamMarkers:
    """Byte strings whose occurrences in a complete SSE event region tell what arrived.

    JSON never holds a raw quote inside a string value (it is escaped as \\"), so a marker that
    starts with a quote can only match a key, never generated text.
    """

    content: tuple[bytes, ...]  # keys whose string value is generated text
    empty: tuple[bytes, ...]  # the same keys with an empty value (role-only / finish chunks)


def _markers(*keys: str) -> StreamMarkers:
    """Both spellings JSON encoders use: compact (orjson, pydantic) and spaced (json.dumps)."""
    content = tuple(f'"{k}"{sep}"'.encode() for k in keys for sep in (":", ": "))
    empty = tuple(f'"{k}"{sep}""'.encode() for k in keys for sep in (":", ": "))
    return StreamMarkers(content=content, empty=empty)


GENERATE_MARKERS = _markers("text")
COMPLETIONS_MARKERS = GENERATE_MARKERS
CHAT_MARKERS = _markers("content", "reasoning_content")

API_PATHS: dict[ApiName, str] = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}
API_MARKERS: dict[ApiName, StreamMarkers] = {
    "generate": GENERATE_MARKERS,
    "completions": COMPLETIONS_MARKERS,
    "chat": CHAT_MARKERS,
}


@dataclass(frozen=True)
class BodyOptions:
    model: str
    ignore_eos: bool
    continuous_usage: bool
    temperature: float = 0.0


def build_body(
    api: ApiName, prompt_ids: list[int], prompt_text: str, output_len: int, opts: BodyOptions
) -> bytes:
    """One request body, pre-encoded once and reused: the hot loop never serialises JSON."""
    body: dict[str, object]
    if api == "generate":
        body = {
            "input_ids": prompt_ids,
            "sampling_params": {
                "max_new_tokens": output_len,
                "ignore_eos": opts.ignore_eos,
                "temperature": opts.temperature,
            },
            "stream": True,
        }
    else:
        body = {
            "model": opts.model,
            "max_tokens": output_len,
            "ignore_eos": opts.ignore_eos,
            "temperature": opts.temperature,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": opts.continuous_usage},
        }
        if api == "completions":
            body["prompt"] = prompt_ids
        else:
            body["messages"] = [{"role": "user", "content": prompt_text}]
    return json.dumps(body, separators=(",", ":")).encode()
