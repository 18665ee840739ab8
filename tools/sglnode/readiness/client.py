"""HTTP to an SGLang server or router: readiness, one tiny generation, model/server info, metrics.

Synchronous on purpose: `sglnode wait` runs the probe in its own thread so a slow answer never
delays reading the log. Endpoints (the pinned SGLang, python/sglang/srt/entrypoints/http_server.py):
`/health_generate` (200 only after a real forward pass), `/health`, `/model_info`,
`/server_info` (`/get_server_info` on older releases), `/metrics` (with --enable-metrics),
`/generate`. The router (sglang-router) serves `/health`, `/generate` and `/v1/*`.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from sglnode.pins import PINS

DEFAULT_TIMEOUT_S = 5.0
# One generation through a PD router touches prefill, KV transfer and decode; allow it longer.
PD_GENERATE_TIMEOUT_S = 30.0
HTTP_OK = 200
HTTP_NOT_FOUND = 404
HTTP_METHOD_NOT_ALLOWED = 405
# Readiness never needs more of an answer than this (a hostile server may send gigabytes).
MAX_BODY_BYTES = 1 << 20
# The smallest real request: one token, greedy, so it is cheap and deterministic.
PING_REQUEST: dict[str, Any] = {"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}


DEFAULT_PORTS = {"http": 80, "https": 443}
# What the messages suggest: SGLang's default port (tools/sglnode/pins.yaml).
EXAMPLE_HOST_PORT = f"127.0.0.1:{PINS.ports.sglang}"
IPV6_EXAMPLE = f"http://[::1]:{PINS.ports.sglang}"
# host[:port] of a base URL: a bracketed IPv6 literal or a name/IPv4 address; no user info.
_NETLOC_RE = re.compile(r"^(?:\[(?P<v6>[^\[\]]*)\]|(?P<host>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}))?$")
_IPV4_LIKE_RE = re.compile(r"^[\d.]+$")


class UrlError(ValueError):
    """A base URL that no request can be sent to; the message says what to write instead."""


@dataclass(frozen=True)
class BaseUrl:
    scheme: str
    host: str  # without brackets
    port: int
    url: str  # scheme://netloc, no trailing slash


def parse_base_url(url: str, schemes: tuple[str, ...] = ("http", "https"), flag: str = "--url") -> BaseUrl:
    """Check a server or router base URL up front: scheme, host, port, IPv6 brackets (issue 16).

    urllib only finds a missing scheme when the first request is made, and an unbracketed IPv6
    address or a port out of range raises deep inside it; here each is a sentence.
    """
    text = url.strip()
    example = f"{schemes[0]}://{EXAMPLE_HOST_PORT}"
    if "://" not in text:
        raise UrlError(f"{flag} {url!r} has no scheme: write {schemes[0]}://{text or EXAMPLE_HOST_PORT}")
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme not in schemes:
        allowed = " or ".join(f"{s}://" for s in schemes)
        tls = "; TLS is not supported here" if scheme == "https" else ""
        raise UrlError(f"{flag} {url!r}: the scheme must be {allowed} (got {scheme}://){tls}")
    try:
        parts = urlsplit(f"{scheme}://{rest}")
    except ValueError as error:  # "Invalid IPv6 URL": an unbalanced bracket
        raise UrlError(
            f"{flag} {url!r}: {error} (an IPv6 address goes in brackets: {IPV6_EXAMPLE})"
        ) from None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UrlError(f"{flag} {url!r}: give the base URL only, without a path or query, e.g. {example}")
    match = _NETLOC_RE.match(parts.netloc)
    if match is None:
        hint = (
            f" (an IPv6 address goes in brackets: {IPV6_EXAMPLE})"
            if parts.netloc.count(":") > 1 or "[" in parts.netloc or "]" in parts.netloc
            else ""
        )
        raise UrlError(f"{flag} {url!r}: {parts.netloc!r} is not host[:port]{hint}")
    host = match.group("v6") if match.group("v6") is not None else match.group("host")
    if match.group("v6") is not None:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise UrlError(f"{flag} {url!r}: [{host}] is not an IPv6 address") from None
    elif _IPV4_LIKE_RE.match(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise UrlError(f"{flag} {url!r}: {host} is not an IPv4 address") from None
    port = int(match.group("port")) if match.group("port") else DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise UrlError(f"{flag} {url!r}: port {port} is out of range (1-65535)")
    return BaseUrl(scheme, host, port, f"{scheme}://{parts.netloc}")


class Readiness(StrEnum):
    READY = "ready"
    STARTING = "starting"  # something answers HTTP, but not "ready" yet
    NO_ANSWER = "no_answer"  # the port accepts connections, but no HTTP answer came
    UNREACHABLE = "unreachable"  # nothing listening (refused), unknown host, no route


@dataclass(frozen=True)
class Probe:
    """One readiness check."""

    readiness: Readiness
    endpoint: str
    status: int | None
    detail: str


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


class Unreachable(Exception):
    """No HTTP answer at all. `accepted`: the TCP connection was made (the server is silent, dropped
    the connection, or sent something that is not HTTP) rather than refused or unresolved."""

    def __init__(self, detail: str, accepted: bool = False) -> None:
        super().__init__(detail)
        self.accepted = accepted


def _no_answer(error: BaseException) -> Unreachable:
    """Classify a failed request: refused/unresolved/unroutable vs connected-but-no-HTTP-answer."""
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        reason = error.reason
        if isinstance(reason, ConnectionRefusedError):
            return Unreachable("connection refused")
        if isinstance(reason, socket.gaierror):
            return Unreachable(f"unknown host: {reason}")
        if isinstance(reason, TimeoutError | socket.timeout):
            return Unreachable("connect timed out (no route, or a firewall drops the packets)")
        return Unreachable(str(reason))
    if isinstance(error, TimeoutError):
        return Unreachable("accepts connections but never answered (timed out)", accepted=True)
    if isinstance(error, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError):
        return Unreachable("accepts connections but closed them without an answer", accepted=True)
    if isinstance(error, http.client.HTTPException):
        detail = f"{type(error).__name__}: {str(error)[:120]}"
        return Unreachable(f"answered with something that is not HTTP ({detail})", accepted=True)
    return Unreachable(str(error) or type(error).__name__)


class SGLangClient:
    """Talks to one base URL, e.g. http://127.0.0.1:<port>."""

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Never route loopback/node traffic through an HTTP proxy from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(
        self, path: str, payload: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Response:
        data = json.dumps(payload).encode("utf-8") if payload is not None else None
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method="POST" if data is not None else "GET",
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with self._opener.open(request, timeout=timeout or self.timeout) as answer:
                return Response(status=answer.status, body=answer.read(MAX_BODY_BYTES))
        except urllib.error.HTTPError as error:
            try:
                body = error.read(MAX_BODY_BYTES) or b""
            except (OSError, http.client.HTTPException):
                body = b""
            return Response(status=error.code, body=body)
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise _no_answer(error) from error

    def health_generate(self) -> Probe:
        """Ready = a real forward pass succeeded; falls back to /health where that is missing."""
        try:
            answer = self.request("/health_generate")
            if answer.status in (HTTP_NOT_FOUND, HTTP_METHOD_NOT_ALLOWED):
                answer = self.request("/health")
                return _probe("/health", answer)
            return _probe("/health_generate", answer)
        except Unreachable as error:
            return _unanswered("/health_generate", error)

    def generate_once(self) -> Probe:
        """Ready = one tiny generation through the router (prefill, KV transfer, decode).

        A 200 counts only when its body is a generation: a JSON object with "text" and no "error"
        (SGLang's GenerateReqInput answer, python/sglang/srt/entrypoints/http_server.py).
        """
        try:
            answer = self.request("/generate", PING_REQUEST, timeout=PD_GENERATE_TIMEOUT_S)
        except Unreachable as error:
            return _unanswered("/generate", error)
        probe = _probe("/generate", answer)
        if probe.readiness is Readiness.READY and not is_generation(answer.body):
            return Probe(
                Readiness.STARTING,
                "/generate",
                answer.status,
                "answered 200 without a generation: " + probe.detail,
            )
        return probe

    def readiness(self, pd: bool = False) -> Probe:
        return self.generate_once() if pd else self.health_generate()

    def model_info(self) -> Any:
        return self.request("/model_info").json()

    def server_info(self) -> Any:
        answer = self.request("/server_info")
        if answer.status == HTTP_NOT_FOUND:
            answer = self.request("/get_server_info")
        return answer.json()

    def metrics(self) -> dict[str, float]:
        return parse_metrics(self.request("/metrics").body.decode("utf-8", errors="replace"))


def is_generation(body: bytes) -> bool:
    """A /generate answer: a JSON object with a "text" string and no error (a list of them for a batch)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return False
    items = payload if isinstance(payload, list) and payload else [payload]
    return all(
        isinstance(item, dict) and isinstance(item.get("text"), str) and not item.get("error")
        for item in items
    )


def _unanswered(endpoint: str, error: Unreachable) -> Probe:
    readiness = Readiness.NO_ANSWER if error.accepted else Readiness.UNREACHABLE
    return Probe(readiness, endpoint, None, str(error))


def _probe(endpoint: str, answer: Response) -> Probe:
    readiness = Readiness.READY if answer.status == HTTP_OK else Readiness.STARTING
    detail = answer.body[:200].decode("utf-8", errors="replace")
    return Probe(readiness, endpoint, answer.status, detail)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format -> {'name{labels}': value}; comments and malformed lines are skipped."""
    values: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "}" in line:
            end = line.rindex("}") + 1
            name, rest = line[:end], line[end:].split()
        else:
            name, *rest = line.split()
        try:
            values[name] = float(rest[0])
        except (ValueError, IndexError):
            continue
    return values
