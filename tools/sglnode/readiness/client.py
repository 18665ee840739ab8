"""HTTP to an SGLang server or router: readiness, one tiny generation, model/server info, metrics.

Synchronous on purpose: `sglnode wait` runs the probe in its own thread so a slow answer never
delays reading the log. Endpoints (SGLang 0.5.23, python/sglang/srt/entrypoints/http_server.py):
`/health_generate` (200 only after a real forward pass), `/health`, `/model_info`,
`/server_info` (`/get_server_info` on older releases), `/metrics` (with --enable-metrics),
`/generate`. The router (sglang-router) serves `/health`, `/generate` and `/v1/*`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

DEFAULT_TIMEOUT_S = 5.0
# One generation through a PD router touches prefill, KV transfer and decode; allow it longer.
PD_GENERATE_TIMEOUT_S = 30.0
HTTP_OK = 200
HTTP_NOT_FOUND = 404
HTTP_METHOD_NOT_ALLOWED = 405
# The smallest real request: one token, greedy, so it is cheap and deterministic.
PING_REQUEST: dict[str, Any] = {"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}


class Readiness(StrEnum):
    READY = "ready"
    STARTING = "starting"  # something answers HTTP, but not "ready" yet
    UNREACHABLE = "unreachable"  # nothing listening / no HTTP answer


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
    """No HTTP answer at all (refused, reset, DNS, timeout before a status line)."""


class SGLangClient:
    """Talks to one base URL, e.g. http://127.0.0.1:30000."""

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
                return Response(status=answer.status, body=answer.read())
        except urllib.error.HTTPError as error:
            return Response(status=error.code, body=error.read() or b"")
        except (TimeoutError, urllib.error.URLError, OSError) as error:
            raise Unreachable(str(getattr(error, "reason", error))) from error

    def health_generate(self) -> Probe:
        """Ready = a real forward pass succeeded; falls back to /health where that is missing."""
        try:
            answer = self.request("/health_generate")
            if answer.status in (HTTP_NOT_FOUND, HTTP_METHOD_NOT_ALLOWED):
                answer = self.request("/health")
                return _probe("/health", answer)
            return _probe("/health_generate", answer)
        except Unreachable as error:
            return Probe(Readiness.UNREACHABLE, "/health_generate", None, str(error))

    def generate_once(self) -> Probe:
        """Ready = one tiny generation through the router (prefill, KV transfer, decode)."""
        try:
            answer = self.request("/generate", PING_REQUEST, timeout=PD_GENERATE_TIMEOUT_S)
        except Unreachable as error:
            return Probe(Readiness.UNREACHABLE, "/generate", None, str(error))
        return _probe("/generate", answer)

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
