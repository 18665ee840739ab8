"""A scriptable SSE server on loopback for the bench tests: it injects known behaviour.

It speaks just enough HTTP/1.1 (keep-alive, chunked or close-delimited bodies) to stand in for
SGLang's /generate and OpenAI endpoints, with paced tokens (known TTFT and ITL), multi-token
chunks, missing usage, early stop, mid-stream disconnect, 5xx, stalls, and a server that dies.
It runs its own event loop in a thread and binds port 0, so tests never clash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Behaviour:
    ttft_s: float = 0.0
    itl_s: float = 0.0  # pause before each chunk after the first
    tokens: int | None = None  # tokens to send; None = what the request asked for
    chunk_tokens: int = 1  # tokens per SSE chunk (speculative decoding sends several)
    usage: str = "continuous"  # "continuous" (every chunk) | "final" | "none"
    disconnect_after_tokens: int | None = None  # drop the connection mid-stream
    stall_after_tokens: int | None = None  # stop sending, keep the connection open
    error_status: int | None = None  # answer with this status instead of a stream
    error_every: int = 0  # with error_status: only every Nth request (0 = all)
    die_after_requests: int | None = None  # stop listening, drop connections after N streams
    framing: str = "chunked"  # "chunked" | "close" (no length, body ends at close)
    split_writes: bool = False  # write every event in two pieces (exercises partial reads)
    prompt_tokens: int = 7
    simulated: bool = False


@dataclass
class FakeServer:
    behaviour: Behaviour
    port: int = 0
    requests_seen: int = 0
    bodies: list[dict] = field(default_factory=list)
    headers: list[bytes] = field(default_factory=list)
    # perf_counter times just before each streamed response's first (last) token chunk was written:
    # the truth a client's TTFT is compared with (the server's own sleep may overshoot).
    first_token_sent: list[float] = field(default_factory=list)
    last_token_sent: list[float] = field(default_factory=list)
    flushes: int = 0
    # A radix-cache stand-in (never flushed, so reuse across stages shows even when the bench
    # flushes): per generation request, how many leading prompt tokens an earlier prompt shared.
    prompt_lengths: list[int] = field(default_factory=list)
    prefix_hits: list[int] = field(default_factory=list)
    _trie: dict = field(default_factory=dict)

    @property
    def cache_hits(self) -> int:
        """Requests whose prompt began like an earlier one (at least one token in common)."""
        return sum(1 for matched in self.prefix_hits if matched > 0)

    def _count_prefix(self, body: dict) -> None:
        prompt = body.get("input_ids") or body.get("prompt")
        if prompt is None and body.get("messages"):
            prompt = body["messages"][-1]["content"].split()
        if not isinstance(prompt, list):
            return  # the one-token "simulated?" probe sends text
        node, matched, sharing = self._trie, 0, True
        for token in prompt:
            if sharing and token in node:
                matched += 1
            else:
                sharing = False
            node = node.setdefault(token, {})
        self.prompt_lengths.append(len(prompt))
        self.prefix_hits.append(matched)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        assert self._ready.wait(5), "fake server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def _shutdown(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.call_later(0.05, self._loop.stop)

    def _die(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                self.requests_seen += 1
                self.headers.append(head)
                self.bodies.append(body)
                self._count_prefix(body)
                path = head.split(b" ")[1].decode()
                keep = await self._respond(path, body, writer)
                if not keep:
                    break
                b = self.behaviour
                streams = sum(
                    1
                    for h in self.headers
                    if b"/server_info" not in h and b"/metrics" not in h and b"/flush_cache" not in h
                )
                if b.die_after_requests is not None and streams >= b.die_after_requests:
                    self._die()
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _respond(self, path: str, body: dict, writer: asyncio.StreamWriter) -> bool:
        b = self.behaviour
        if path == "/flush_cache":
            text = "Cache flushed.\n"
            self.flushes += 1
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(text)}\r\n\r\n{text}".encode())
            await writer.drain()
            return True
        if path in ("/server_info", "/metrics"):
            text = (
                json.dumps({"simulated": b.simulated})
                if path == "/server_info"
                else f"sglnode_simulated {1 if b.simulated else 0}\n"
            )
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(text)}\r\n\r\n{text}".encode())
            await writer.drain()
            return True
        if b.error_status and (b.error_every == 0 or self.requests_seen % b.error_every == 0):
            msg = b'{"error": "overloaded"}'
            head = f"HTTP/1.1 {b.error_status} Error\r\nContent-Length: {len(msg)}\r\n\r\n"
            writer.write(head.encode() + msg)
            await writer.drain()
            return True
        requested = body.get("max_tokens") or body.get("sampling_params", {}).get("max_new_tokens", 16)
        total = b.tokens if b.tokens is not None else requested
        api = "generate" if path == "/generate" else ("chat" if "chat" in path else "completions")
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        head += (
            "Transfer-Encoding: chunked\r\n\r\n" if b.framing == "chunked" else "Connection: close\r\n\r\n"
        )
        writer.write(head.encode())

        async def send(event: str) -> None:
            data = f"data: {event}\n\n".encode()
            if b.framing == "chunked":
                data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
            if b.split_writes:
                half = len(data) // 2
                writer.write(data[:half])
                await writer.drain()
                await asyncio.sleep(0.001)
                writer.write(data[half:])
            else:
                writer.write(data)
            await writer.drain()

        await asyncio.sleep(b.ttft_s)
        sent = 0
        if api == "chat":
            await send(self._event(api, "", sent, total, role=True))
        while sent < total:
            if sent:
                await asyncio.sleep(b.itl_s)
            k = min(b.chunk_tokens, total - sent)
            sent += k
            # Both stamps are taken just before the write, so a client's receive time is never
            # earlier than its stamp (after the write, a busy loop could stamp the last one late).
            if sent == k:
                self.first_token_sent.append(time.perf_counter())
            if sent == total:
                self.last_token_sent.append(time.perf_counter())
            await send(self._event(api, "tok " * k, sent, total))
            if b.disconnect_after_tokens is not None and sent >= b.disconnect_after_tokens:
                writer.transport.abort()
                return False
            if b.stall_after_tokens is not None and sent >= b.stall_after_tokens:
                await asyncio.sleep(3600)
        if api != "generate" and b.usage != "none":
            await send(self._final_usage(api, sent))
        await send("[DONE]")
        if b.framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        await writer.drain()
        return False

    def _usage(self, completion: int) -> dict:
        p = self.behaviour.prompt_tokens
        return {"prompt_tokens": p, "completion_tokens": completion, "total_tokens": p + completion}

    def _event(self, api: str, text: str, cum: int, total: int, role: bool = False) -> str:
        b = self.behaviour
        done = cum >= total and not role
        if api == "generate":
            meta: dict = {"id": "r1", "finish_reason": {"type": "length"} if done else None}
            if b.usage != "none":
                meta.update(prompt_tokens=b.prompt_tokens, completion_tokens=cum)
            return json.dumps({"text": "tok " * cum, "meta_info": meta, "index": 0})
        usage = self._usage(cum) if b.usage == "continuous" else None
        if api == "chat":
            delta = {"role": "assistant", "content": ""} if role else {"content": text}
            choice = {"index": 0, "delta": delta, "finish_reason": "length" if done else None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length" if done else None}
        return json.dumps({"id": "c1", "object": "chunk", "choices": [choice], "usage": usage})

    def _final_usage(self, api: str, completion: int) -> str:
        return json.dumps({"id": "c1", "object": "chunk", "choices": [], "usage": self._usage(completion)})
