"""What the bench is pointed at: address parsing and the simulator check.

The simulator (`sglnode sim`) says what it is: /server_info has "simulated": true, /metrics has
the gauge `sglnode_simulated 1`, and every generation's JSON carries "simulated": true. A router in
front (sglang-router) answers neither of the first two itself, so a one-token /generate is the
last probe. A figure measured against the simulator is a property of the simulator, never of
SGLang, and the report says so loudly.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from sglnode.readiness.client import parse_base_url

# A probe is best-effort: a router may not serve /server_info; never delay the run for long.
PROBE_TIMEOUT_S = 3.0
_SIM_GAUGE_RE = re.compile(r"^sglnode_simulated(?:\{[^}]*\})?\s+1(?:\.0+)?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base_url: str


def parse_url(url: str) -> Endpoint:
    """http://host:port only (the bench client speaks plain HTTP/1.1; TLS is not supported)."""
    base = parse_base_url(url, schemes=("http",))
    return Endpoint(base.host, base.port, base.url)


# The smallest generation that passes through a router to a worker (and, for PD, both sides).
ONE_TOKEN_GENERATE = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1}}).encode()


# Never route the probes through an HTTP proxy from the environment (the bench never does either).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, api_key: str | None, data: bytes | None = None) -> str | None:
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _OPENER.open(request, timeout=PROBE_TIMEOUT_S) as response:
            return response.read(1 << 20).decode(errors="replace")
    # Anything a hostile or broken peer can do (refuse, drop, send no HTTP) just means "no answer".
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return None


def _says_simulated(body: str) -> bool:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(payload, dict):
        return False
    meta = payload.get("meta_info")
    return payload.get("simulated") is True or (isinstance(meta, dict) and meta.get("simulated") is True)


def probe_simulated(base_url: str, api_key: str | None) -> dict[str, object]:
    """{"simulated": bool, "evidence": [...]} from /server_info and /metrics."""
    evidence = []
    info = _get(f"{base_url}/server_info", api_key)
    if info:
        try:
            if json.loads(info).get("simulated") is True:
                evidence.append('/server_info has "simulated": true')
        except (ValueError, AttributeError, RecursionError):
            pass
    metrics = _get(f"{base_url}/metrics", api_key)
    if metrics and _SIM_GAUGE_RE.search(metrics):
        evidence.append("/metrics has sglnode_simulated 1")
    if not evidence:
        generated = _get(f"{base_url}/generate", api_key, ONE_TOKEN_GENERATE)
        if generated and _says_simulated(generated):
            evidence.append('a one-token /generate answered with "simulated": true')
    return {"simulated": bool(evidence), "evidence": evidence}


# SGLang's POST /flush_cache (http_server.py) refuses while requests run; it takes a `timeout`
# query parameter there, which the router may not pass on, so none is sent. A stage only starts
# after the previous one ended, so nothing of ours is running.
FLUSH_TIMEOUT_S = 30.0


def flush_cache(base_url: str, api_key: str | None) -> dict[str, object]:
    """POST /flush_cache: {"ok", "status", "detail"}; never raises (the run goes on, the report says)."""
    request = urllib.request.Request(f"{base_url}/flush_cache", data=b"", method="POST")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _OPENER.open(request, timeout=FLUSH_TIMEOUT_S) as response:
            status = response.status
            body = response.read(2048)
    except urllib.error.HTTPError as error:
        status = error.code
        try:
            body = error.read(2048) or b""
        except (OSError, http.client.HTTPException):
            body = b""
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as error:
        return {"ok": False, "status": None, "detail": f"no answer: {getattr(error, 'reason', error)}"[:200]}
    detail = body.decode(errors="replace").strip().splitlines()
    return {"ok": status == 200, "status": status, "detail": (detail[0] if detail else "")[:200]}
