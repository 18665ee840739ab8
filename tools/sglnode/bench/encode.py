"""HTTP requests of a run, encoded on demand from (prompt spec, request number): never a pool.

The body layout is `apis.build_body`'s (the one source of truth): it is rendered once around a
placeholder prompt and split there, so each request only joins its prompt's bytes in between.
An encoder crosses into worker processes by pickling its settings; each process rebuilds its
own id table (prompts.PromptFactory) on first use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sglnode.bench.apis import API_PATHS, ApiName, BodyOptions, build_body
from sglnode.bench.prompts import PromptFactory, PromptSpec

_PLACEHOLDER_ID = 987654321987
_PLACEHOLDER_TEXT = "\x00sglnode-prompt\x00"


@dataclass
class RequestEncoder:
    api: ApiName
    host_header: str
    output_len: int
    body_options: BodyOptions
    prompts: PromptSpec
    api_key: str | None = None
    _factory: PromptFactory | None = field(default=None, repr=False, compare=False)
    _template: tuple[bytes, bytes, bytes] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_factory"] = state["_template"] = None  # rebuilt in the process that uses it
        return state

    def _parts(self) -> tuple[bytes, bytes, bytes]:
        if self._template is None:
            body = build_body(
                self.api, [_PLACEHOLDER_ID], _PLACEHOLDER_TEXT, self.output_len, self.body_options
            )
            marker = (
                json.dumps(_PLACEHOLDER_TEXT).encode()
                if self.api == "chat"
                else str(_PLACEHOLDER_ID).encode()
            )
            before, found, after = body.partition(marker)
            assert found, "the placeholder prompt must appear in the body exactly once"
            head = (
                f"POST {API_PATHS[self.api]} HTTP/1.1\r\nHost: {self.host_header}\r\n"
                "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            )
            if self.api_key:
                head += f"Authorization: Bearer {self.api_key}\r\n"
            self._template = (head.encode(), before, after)
        return self._template

    @property
    def factory(self) -> PromptFactory:
        if self._factory is None:
            self._factory = PromptFactory(self.prompts)
        return self._factory

    def body(self, n: int) -> bytes:
        _, before, after = self._parts()
        factory = self.factory
        prompt = json.dumps(factory.text(n)).encode() if self.api == "chat" else factory.ids_json(n)
        return before + prompt + after

    def request(self, n: int) -> bytes:
        """The whole HTTP request of request number n."""
        head = self._parts()[0]
        body = self.body(n)
        return head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
