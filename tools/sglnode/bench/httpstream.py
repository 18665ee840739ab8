"""A lean HTTP/1.1 streaming client for SSE responses, built on asyncio protocols.

Why not aiohttp: a general client parses every SSE line into a dict, which caps one core near
60-90k tokens/s (issue 6). This client does per-read work only: it de-chunks the socket read,
keeps the bytes up to the last complete SSE event, and counts/finds a few byte markers in them
with C-speed bytes methods. All events in one read arrived at the same instant as far as any
client can tell, so one timestamp per read loses nothing.

Connections are kept alive and reused; a reused connection that the server closed while idle
is retried once on a fresh one (what every HTTP client does), never counted as an error.
"""

from __future__ import annotations

import asyncio
import re
from time import perf_counter

from sglnode.bench.apis import StreamMarkers
from sglnode.bench.records import GapSink, RequestRecord, build_record, derive_gaps

# Cap on a response head or an error body we keep; beyond it the response is malformed for us.
MAX_HEAD_BYTES = 64 * 1024
MAX_ERROR_BODY_BYTES = 512
ERROR_SNIPPET_CHARS = 160

_COMPLETION_TOKENS = b'"completion_tokens":'
_COMPLETION_TOKENS_LEN = len(_COMPLETION_TOKENS)
_PROMPT_TOKENS = b'"prompt_tokens":'
_DONE_EVENTS = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n")
_ERROR_KEY = b'"error":'
# SGLang marks an aborted request with finish_reason "abort" (OpenAI) or {"type": "abort"} (/generate).
_ABORT_VALUE = b'"abort"'
_INT_RE = re.compile(rb" *(\d+)")

_IDLE, _HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE = range(5)
# Longest chunk-size line the fast path accepts (hex digits; longer lines take the general path).
_MAX_FAST_CHUNK_HEADER = 8


def _int_at(buf: bytes, pos: int) -> int | None:
    match = _INT_RE.match(buf, pos)
    return int(match.group(1)) if match else None


class StreamProtocol(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self, markers: StreamMarkers) -> None:
        self.markers = markers
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
        self.done_seen = False
        self.stream_error: str | None = None
        self.status = 0
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
        self, loop: asyncio.AbstractEventLoop, request: bytes
    ) -> asyncio.Future[tuple[str | None, float]]:
        self._reset_request()
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
        elif self.stream_error is not None:
            error = self.stream_error
        elif not self.done_seen:
            error = "stream_ended_without_done"
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((error, now))
        if not self.keep_alive and self.transport is not None:
            self.closed = True
            self.transport.close()

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

    # --- SSE scanning --------------------------------------------------------------------------
    def _feed_body(self, payload: bytes, now: float) -> None:
        if self.status != 200:
            if len(self._error_body) < MAX_ERROR_BODY_BYTES:
                self._error_body += payload[:MAX_ERROR_BODY_BYTES]
            return
        if self._tail:
            payload = self._tail + payload
        cut = payload.rfind(b"\n\n")
        if cut < 0:
            cut = payload.rfind(b"\n\r\n") + 1  # SSE allows CRLF line ends; 0 when absent
            if cut == 0:
                self._tail = payload
                return
        end = cut + 2
        if end == len(payload):
            region = payload
            self._tail = b""
        else:
            region = payload[:end]
            self._tail = payload[end:]
        markers = self.markers
        chunks = 0
        for key in markers.content:
            chunks += region.count(key)
        if b'""' in region:  # only then can an empty-text event be present
            for key in markers.empty:
                chunks -= region.count(key)
        at = region.rfind(_COMPLETION_TOKENS)
        cum = _int_at(region, at + _COMPLETION_TOKENS_LEN) if at >= 0 else None
        if self.counted is None and (chunks > 0 or cum):
            self.counted = cum is not None
        if self.counted:
            tokens = 0
            if cum is not None and cum > self.cum:
                tokens = cum - self.cum
                self.cum = self.reported = cum
        else:
            tokens = chunks
            if cum is not None:
                self.reported = cum  # the final usage chunk
        if self.prompt_tokens is None:
            at = region.find(_PROMPT_TOKENS)
            if at >= 0:
                self.prompt_tokens = _int_at(region, at + len(_PROMPT_TOKENS))
        if tokens or chunks:
            self.times.append(now)
            self.tokens.append(tokens)
            self.chunks.append(chunks)
        if region.endswith(_DONE_EVENTS):  # [DONE] is the last event, so no scan is needed
            self.done_seen = True
        if self.stream_error is None and (_ERROR_KEY in region or _ABORT_VALUE in region):
            self.stream_error = _stream_error(region)


def _stream_error(region: bytes) -> str | None:
    """An error object or an abort finish reason in the events; `"error": null` is no error."""
    at = region.find(_ERROR_KEY)
    while at >= 0:
        value_at = at + len(_ERROR_KEY)
        if not region[value_at : value_at + 8].lstrip(b" ").startswith(b"null"):
            return "error_event: " + region[at : at + ERROR_SNIPPET_CHARS].decode(errors="replace")
        at = region.find(_ERROR_KEY, value_at)
    return "server_aborted" if _ABORT_VALUE in region else None


class StreamClient:
    """One client slot: a reusable connection and the request/response cycle on it."""

    def __init__(
        self,
        host: str,
        port: int,
        markers: StreamMarkers,
        connect_timeout_s: float,
    ) -> None:
        self.host = host
        self.port = port
        self.markers = markers
        self.connect_timeout_s = connect_timeout_s
        self.proto: StreamProtocol | None = None
        self.in_flight = False

    async def _connect(self) -> StreamProtocol:
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: StreamProtocol(self.markers), self.host, self.port),
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
                error, end = await proto.begin(loop, request)
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
