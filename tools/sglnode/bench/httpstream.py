"""A lean HTTP/1.1 streaming client for SSE responses, built on asyncio protocols, with a strict parser.

Why not aiohttp: a general client's per-line machinery caps one core near 60-90k tokens/s (issue 6).
This client works per socket read: it de-chunks the read, keeps the bytes up to the last complete
SSE event, and parses each complete event with the C JSON decoder, checking it against the API's
shape (apis.py). All events in one read arrived at the same instant as far as any client can tell,
so one timestamp per read loses nothing.

Strict (issue 16): a response counts only when it is `text/event-stream`, every event is `data:`
framed and valid JSON of the API's shape, token counts never go down or exceed what was asked,
text arrived for the tokens reported, and `data: [DONE]` ends it with nothing after. Anything else
fails the request with a reason (docs/bench.md, "ok and error").

Connections are kept alive and reused; a reused connection that the server closed while idle
is retried once on a fresh one (what every HTTP client does), never counted as an error.
"""

from __future__ import annotations

import asyncio
import json
from time import perf_counter

from sglnode.bench.apis import API_CACHED, API_INSPECTORS, ApiName
from sglnode.bench.records import GapSink, RequestRecord, build_record, derive_gaps

# Cap on a response head or an error body we keep; beyond it the response is malformed for us.
MAX_HEAD_BYTES = 64 * 1024
MAX_ERROR_BODY_BYTES = 512
ERROR_SNIPPET_CHARS = 160
# Longest single SSE event accepted: far above any SGLang chunk (one token's text plus metadata,
# or logprobs); a peer that sends more without an event end is not streaming events.
MAX_EVENT_BYTES = 1 << 20
SSE_CONTENT_TYPE = b"text/event-stream"

_IDLE, _HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE = range(5)
# Longest chunk-size line the fast path accepts (hex digits; longer lines take the general path).
_MAX_FAST_CHUNK_HEADER = 8


_scan_once = json.JSONDecoder().scan_once


def _parse_json(data: bytes) -> object:
    """json.loads(data), minus its per-call overhead when the event is plain UTF-8 JSON (the rule).

    The C scanner parses one value; it counts only when it spans the whole event. Anything else
    (leading space, trailing bytes, invalid JSON) takes json.loads, which decides and names the error.
    """
    try:
        text = data.decode()
        value, end = _scan_once(text, 0)
        if end == len(text):
            return value
    except (UnicodeDecodeError, StopIteration, ValueError):
        pass
    return json.loads(data)


class StreamProtocol(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self, api: ApiName) -> None:
        self.inspect = API_INSPECTORS[api]
        self.cached_of = API_CACHED[api]
        self.requested = 0
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.mode = _IDLE
        self.waiter: asyncio.Future[tuple[str | None, float]] | None = None
        self.start = 0.0
        self.last_read = 0.0
        self.got_bytes = False
        self._reset_request()

    def _reset_request(self) -> None:
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.chunks: list[int] = []
        self.counted: bool | None = None  # per-chunk cumulative counts present; None until known
        self.cum = 0
        self.reported: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.done_seen = False
        self.events = 0
        self.stream_error: str | None = None
        self.status = 0
        self.sse = True
        self.content_type = b""
        self.keep_alive = True
        self._head = b""
        self._raw = b""
        self._tail = b""
        self._chunk_left = 0
        self._length_left = 0
        self._error_body = b""

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if self.mode == _UNTIL_CLOSE:
            self._complete(perf_counter())
        elif exc is not None:
            self._fail(f"connection_reset: {exc}")
        elif not self.got_bytes:
            self._fail("closed_before_response")
        else:
            self._fail("disconnected_mid_stream")

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        self.last_read = now
        self.got_bytes = True
        mode = self.mode
        if mode == _CHUNKED:
            self._feed_chunked(data, now)
        elif mode == _HEAD:
            self._feed_head(data, now)
        elif mode == _LENGTH:
            self._feed_length(data, now)
        elif mode == _UNTIL_CLOSE:
            self._feed_body(data, now)
        elif data.strip(b"\r\n"):
            # Bytes outside a request: the framing is lost, so this connection is unusable.
            self.abort("unexpected_bytes_between_responses")

    # --- request lifecycle ---------------------------------------------------------------------
    def begin(
        self, loop: asyncio.AbstractEventLoop, request: bytes, requested: int = 0
    ) -> asyncio.Future[tuple[str | None, float]]:
        self._reset_request()
        self.requested = requested
        self.waiter = loop.create_future()
        self.mode = _HEAD
        self.got_bytes = False
        self.start = self.last_read = perf_counter()
        assert self.transport is not None
        self.transport.write(request)
        return self.waiter

    def abort(self, reason: str) -> None:
        """Fail the request in flight (watchdog: stall, timeout) and drop the connection."""
        self._fail(reason)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, reason: str) -> None:
        self.mode = _IDLE
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((reason, perf_counter()))

    def _complete(self, now: float) -> None:
        self.mode = _IDLE
        error: str | None = None
        if self.status != 200:
            snippet = self._error_body[:ERROR_SNIPPET_CHARS].decode(errors="replace").strip()
            error = f"http_{self.status}: {snippet}" if snippet else f"http_{self.status}"
        elif not self.sse:
            snippet = self._error_body[:60].decode(errors="replace").strip()
            kind = self.content_type.decode(errors="replace") or "none"
            error = f"not_sse: status 200 with Content-Type {kind}: {snippet!r}"
        else:
            error = self._stream_verdict()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((error, now))
        if not self.keep_alive and self.transport is not None:
            self.closed = True
            self.transport.close()

    def _stream_verdict(self) -> str | None:
        """Why a complete 200 event stream is still not a good response, or None."""
        if self.stream_error is not None:
            return self.stream_error
        if self._tail.strip(b"\r\n"):
            return f"bad_sse_framing: the stream ended inside an event: {self._tail[:60]!r}"
        if not self.done_seen:
            return "stream_ended_without_done"
        chunks = sum(self.chunks)
        arrived = sum(self.tokens)
        requested = self.requested
        if self.reported is not None and requested and self.reported > requested:
            return f"over_requested: the server reported {self.reported} tokens, {requested} were requested"
        if self.reported is None and requested and arrived > requested:
            return f"over_requested: {arrived} text events for {requested} requested tokens"
        if self.reported and not chunks:
            return (
                f"tokens_without_events: the server reported {self.reported} tokens but no event carried text"
            )
        return None

    # --- HTTP framing --------------------------------------------------------------------------
    def _feed_head(self, data: bytes, now: float) -> None:
        buf = self._head + data if self._head else data
        if not self._head:
            buf = buf.lstrip(b"\r\n")  # the CRLF ending the previous chunked body, if it came late
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self.abort("response_head_too_large")
            else:
                self._head = buf
            return
        self._head = b""
        lines = buf[:end].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            self.abort(f"bad_status_line: {lines[0][:80]!r}")
            return
        self.status = int(parts[1])
        chunked = False
        length: int | None = None
        self.keep_alive = parts[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value
            elif name == b"content-length" and value.isdigit():
                length = int(value)
            elif name == b"connection":
                self.keep_alive = value != b"close"
            elif name == b"content-type":
                self.content_type = value[:80]
        # A 200 that is not an event stream is never a good response, whatever its body holds.
        self.sse = self.content_type.split(b";", 1)[0].strip() == SSE_CONTENT_TYPE
        rest = buf[end + 4 :]
        if chunked:
            self.mode = _CHUNKED
            self._chunk_left = 0
            if rest:
                self._feed_chunked(rest, now)
        elif length is not None:
            self.mode = _LENGTH
            self._length_left = length
            if length == 0:
                self._complete(now)
            elif rest:
                self._feed_length(rest, now)
        else:
            self.mode = _UNTIL_CLOSE
            self.keep_alive = False
            if rest:
                self._feed_body(rest, now)

    def _feed_length(self, data: bytes, now: float) -> None:
        left = self._length_left
        if len(data) >= left:
            self._length_left = 0
            self._feed_body(data[:left], now)
            if self.mode == _LENGTH:
                self._complete(now)
        else:
            self._length_left = left - len(data)
            self._feed_body(data, now)

    def _feed_chunked(self, data: bytes, now: float) -> None:
        if not self._raw and not self._chunk_left:
            # Fast path: the read is exactly one whole chunk (one SSE event as servers send it).
            eol = data.find(b"\r\n")
            if 0 < eol <= _MAX_FAST_CHUNK_HEADER:
                try:
                    end = eol + 2 + int(data[:eol], 16)
                except ValueError:
                    end = -1
                if end + 2 == len(data) and end > eol + 2:
                    self._feed_body(data[eol + 2 : end], now)
                    return
        buf = self._raw + data if self._raw else data
        self._raw = b""
        size = len(buf)
        pos = 0
        left = self._chunk_left  # bytes of the current chunk still due, its trailing CRLF included
        parts: list[bytes] = []
        finished = False
        while pos < size:
            if left:
                take = left if left <= size - pos else size - pos
                payload = min(take, max(left - 2, 0))
                if payload:
                    parts.append(buf[pos : pos + payload])
                pos += take
                left -= take
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                self._raw = buf[pos:]
                break
            if eol == pos:  # a stray CRLF (trailer end); skip it
                pos += 2
                continue
            try:
                chunk_size = int(buf[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                self.abort(f"bad_chunk_header: {buf[pos:eol][:40]!r}")
                return
            pos = eol + 2
            if chunk_size == 0:
                finished = True
                break
            left = chunk_size + 2
        self._chunk_left = left
        if parts:
            self._feed_body(parts[0] if len(parts) == 1 else b"".join(parts), now)
        if finished and self.mode == _CHUNKED:
            self._complete(now)

    # --- SSE parsing --------------------------------------------------------------------------
    def _feed_body(self, payload: bytes, now: float) -> None:
        if self.status != 200 or not self.sse:
            if len(self._error_body) < MAX_ERROR_BODY_BYTES:
                self._error_body += payload[: MAX_ERROR_BODY_BYTES - len(self._error_body)]
            return
        if self.stream_error is not None:
            return  # the request already failed; read on only to keep the connection in step
        if self._tail:
            payload = self._tail + payload
            self._tail = b""
        carry = b""
        if b"\r" in payload:  # SSE allows CRLF line ends: one spelling from here on
            if payload.endswith(b"\r"):  # its \n may come in the next read
                payload, carry = payload[:-1], b"\r"
            payload = payload.replace(b"\r\n", b"\n")
        cut = payload.rfind(b"\n\n")
        if cut < 0:
            self._tail = payload + carry
            if len(self._tail) > MAX_EVENT_BYTES:
                self._bad(f"bad_sse_framing: no end of event within {MAX_EVENT_BYTES} bytes")
            return
        end = cut + 2
        self._tail = payload[end:] + carry
        self._events(payload if end == len(payload) else payload[:end], now)

    def _events(self, region: bytes, now: float) -> None:
        """Parse every complete event of one read; the read's time stamps what it carried."""
        inspect = self.inspect
        chunks = 0
        cum: int | None = None
        for raw in region.split(b"\n\n") if region.count(b"\n\n") > 1 else (region[:-2],):
            if raw[:6] == b"data: " and b"\n" not in raw:
                data = raw[6:]  # the fast path: one `data: ` line, as SGLang and the router send
            elif not raw.strip(b"\n"):
                continue  # blank lines between events
            else:
                data = self._data_of(raw)
                if data is None:
                    if self.stream_error is not None:
                        return
                    continue  # a comment-only event (keep-alive)
            if self.done_seen:
                self._bad("bad_sse_framing: an event after data: [DONE]")
                return
            if data == b"[DONE]":
                self.done_seen = True
                continue
            try:
                event = _parse_json(data)
                content, completion, prompt, error = inspect(event)
                cached = self.cached_of(event) if prompt is not None else None
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, BadEvent, too deep
                self._bad(f"bad_event: {exc}"[:ERROR_SNIPPET_CHARS] + f" in {data[:60]!r}")
                return
            if error is not None:
                self.stream_error = error
                return
            if content:
                chunks += 1
            if self.counted is None and (content or completion):
                # Decided by the first event with text or a count: cumulative counts in every event?
                self.counted = completion is not None
            if completion is not None:
                if completion < (self.cum if cum is None else cum):
                    self._bad(f"bad_usage: completion_tokens went down to {completion}")
                    return
                cum = completion
            if prompt is not None and self.prompt_tokens is None:
                self.prompt_tokens = prompt
            if cached is not None:
                self.cached_tokens = cached
        if cum is not None:
            tokens = cum - self.cum if self.counted else chunks
            self.reported = self.cum = cum
        else:
            tokens = 0 if self.counted else chunks
        if tokens or chunks:
            self.times.append(now)
            self.tokens.append(tokens)
            self.chunks.append(chunks)

    def _data_of(self, raw: bytes) -> bytes | None:
        """The data of a multi-line event (SSE: data lines joined by newlines; `:` lines are comments).

        Any other field (event:, id:, retry:) or a line that is no field at all is malformed here:
        SGLang and the router send data lines only, and a body that is not SSE must never pass.
        """
        data: list[bytes] = []
        for line in raw.strip(b"\n").split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            elif not line.startswith(b":"):
                self._bad(f"bad_sse_framing: {line[:60]!r} is not a data: line")
                return None
        return b"\n".join(data) if data else None

    def _bad(self, reason: str) -> None:
        """A malformed response: fail the request now and drop the connection (its framing is suspect)."""
        self.abort(reason)


class StreamClient:
    """One client slot: a reusable connection and the request/response cycle on it."""

    def __init__(
        self,
        host: str,
        port: int,
        api: ApiName,
        connect_timeout_s: float,
    ) -> None:
        self.host = host
        self.port = port
        self.api = api
        self.connect_timeout_s = connect_timeout_s
        self.proto: StreamProtocol | None = None
        self.in_flight = False

    async def _connect(self) -> StreamProtocol:
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: StreamProtocol(self.api), self.host, self.port),
            self.connect_timeout_s,
        )
        return proto

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def request(
        self, request: bytes, requested_tokens: int, itl: GapSink, chunk_gaps: GapSink
    ) -> tuple[RequestRecord, bool]:
        """Send one pre-encoded request; returns its record and whether the failure was a connect failure."""
        loop = asyncio.get_running_loop()
        self.in_flight = True
        try:
            for attempt in range(2):
                reused = self.proto is not None and not self.proto.closed
                if not reused:
                    start = perf_counter()
                    try:
                        self.proto = await self._connect()
                    except (OSError, TimeoutError) as exc:
                        reason = (
                            "connect_timeout" if isinstance(exc, TimeoutError) else f"connect_failed: {exc}"
                        )
                        return _failed(start, reason, requested_tokens), True
                proto = self.proto
                assert proto is not None
                error, end = await proto.begin(loop, request, requested_tokens)
                if error == "closed_before_response" and reused and attempt == 0:
                    continue  # the server closed the idle keep-alive connection; retry fresh
                if error is None:
                    derive_gaps(proto.times, proto.tokens, proto.chunks, itl, chunk_gaps)
                record = build_record(
                    start=proto.start,
                    end=end,
                    times=proto.times,
                    tokens=proto.tokens,
                    chunks=proto.chunks,
                    reported_tokens=proto.reported,
                    prompt_tokens=proto.prompt_tokens,
                    cached_tokens=proto.cached_tokens,
                    requested_tokens=requested_tokens,
                    per_chunk_counts=bool(proto.counted),
                    error=error,
                )
                return record, False
            raise AssertionError("unreachable: the retry loop always returns")
        finally:
            self.in_flight = False


def _failed(start: float, reason: str, requested_tokens: int) -> RequestRecord:
    return build_record(
        start=start,
        end=None,
        times=[],
        tokens=[],
        chunks=[],
        reported_tokens=None,
        prompt_tokens=None,
        requested_tokens=requested_tokens,
        per_chunk_counts=False,
        error=reason,
    )
