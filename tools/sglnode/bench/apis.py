"""The three streaming APIs the bench drives, as data: path, request body, and the shape of one
streamed event that the strict parser checks.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

ApiName = Literal["generate", "completions", "chat"]
API_NAMES: tuple[ApiName, ...] = ("generate", "completions", "chat")


API_PATHS: dict[ApiName, str] = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}
# --- event shapes (the strict parser's view of one `data:` event) -----------------------------
# What one parsed event says: (carries generated text, cumulative completion_tokens or None,
# prompt_tokens or None, error or None). An error fails the request: the reason names it.
EventInfo = tuple[bool, int | None, int | None, str | None]
EventInspector = Callable[[object], EventInfo]
SNIPPET_CHARS = 120


class BadEvent(ValueError):
    """An event that parsed as JSON but is not the API's shape."""


def _count(container: dict[str, object], key: str) -> int | None:
    """A token count: absent/null -> None; a non-negative int -> it; anything else is malformed."""
    value = container.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise BadEvent(f"{key} is {value!r}, not a token count")
    return value


def _error_of(event: dict[str, object]) -> str | None:
    """SGLang's stream errors: {"error": {...}} (both APIs) or an ErrorResponse ({"object": "error"})."""
    error = event.get("error")
    if error is not None:
        return "error_event: " + json.dumps(error)[:SNIPPET_CHARS]
    if event.get("object") == "error":
        return "error_event: " + str(event.get("message"))[:SNIPPET_CHARS]
    return None


def inspect_generate(event: object) -> EventInfo:
    """/generate: {"text": str (cumulative), "meta_info": {"completion_tokens", "prompt_tokens",
    "finish_reason": {"type": ...} | null, ...}} (io_struct.py, http_server.py stream_results).

    Runs once per streamed event: the common case is a few dict lookups and type checks.
    """
    if type(event) is not dict:
        raise BadEvent("not a JSON object")
    text = event.get("text")
    meta = event.get("meta_info")
    if type(text) is not str or type(meta) is not dict or "error" in event or "object" in event:
        error = _error_of(event)
        if error is not None:
            return False, None, None, error
        if type(text) is not str or type(meta) is not dict:
            raise BadEvent('a /generate event needs "text" (string) and "meta_info" (object)')
    completion = meta.get("completion_tokens")
    prompt = meta.get("prompt_tokens")
    if (completion is not None and (type(completion) is not int or completion < 0)) or (
        prompt is not None and (type(prompt) is not int or prompt < 0)
    ):
        _count(meta, "completion_tokens")
        _count(meta, "prompt_tokens")
    finish = meta.get("finish_reason")
    aborted = finish is not None and type(finish) is dict and finish.get("type") == "abort"
    return text != "", completion, prompt, "server_aborted" if aborted else None


def _openai(event: object, content_of: Callable[[dict[str, object]], bool]) -> EventInfo:
    if not isinstance(event, dict):
        raise BadEvent("not a JSON object")
    error = _error_of(event)
    if error is not None:
        return False, None, None, error
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise BadEvent('an OpenAI stream chunk needs a "choices" list')
    content = False
    aborted = False
    for choice in choices:
        if not isinstance(choice, dict):
            raise BadEvent("a choice is not an object")
        content = content_of(choice) or content
        aborted = aborted or choice.get("finish_reason") == "abort"
    usage = event.get("usage")
    if usage is None:
        completion = prompt = None
    elif isinstance(usage, dict):
        completion, prompt = _count(usage, "completion_tokens"), _count(usage, "prompt_tokens")
    else:
        raise BadEvent('"usage" is neither null nor an object')
    return content, completion, prompt, "server_aborted" if aborted else None


def _completion_text(choice: dict[str, object]) -> bool:
    text = choice.get("text")
    if not isinstance(text, str):
        raise BadEvent('a completion choice needs "text" (string)')
    return bool(text)


def _chat_content(choice: dict[str, object]) -> bool:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        raise BadEvent('a chat choice needs "delta" (object)')
    found = False
    for key in ("content", "reasoning_content"):
        value = delta.get(key)
        if value is not None and not isinstance(value, str):
            raise BadEvent(f"delta.{key} is neither null nor a string")
        found = found or bool(value)
    return found


def inspect_completions(event: object) -> EventInfo:
    """/v1/completions: CompletionStreamResponse (protocol.py): choices[].text, usage."""
    return _openai(event, _completion_text)


def inspect_chat(event: object) -> EventInfo:
    """/v1/chat/completions: ChatCompletionStreamResponse: choices[].delta.content, usage."""
    return _openai(event, _chat_content)


def cached_generate(event: object) -> int | None:
    """Prompt tokens the server took from its prefix cache: /generate's meta_info.cached_tokens."""
    meta = event.get("meta_info") if isinstance(event, dict) else None
    return _count(meta, "cached_tokens") if isinstance(meta, dict) else None


def cached_openai(event: object) -> int | None:
    """usage.prompt_tokens_details.cached_tokens (SGLang sends it with --enable-cache-report)."""
    usage = event.get("usage") if isinstance(event, dict) else None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    return _count(details, "cached_tokens") if isinstance(details, dict) else None


# Read only from events that carry the prompt count (the usage events), never per token.
API_CACHED: dict[ApiName, Callable[[object], int | None]] = {
    "generate": cached_generate,
    "completions": cached_openai,
    "chat": cached_openai,
}

API_INSPECTORS: dict[ApiName, EventInspector] = {
    "generate": inspect_generate,
    "completions": inspect_completions,
    "chat": inspect_chat,
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
