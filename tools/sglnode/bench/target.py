"""What the bench is pointed at: address parsing and the simulator check.

The simulator (`sglnode sim`) says what it is: /server_info has "simulated": true, /metrics has
the gauge `sglnode_simulated 1`, and every generation's JSON carries "simulated": true. A router in
front (sglang-router) answers neither of the first two itself, so a one-token /generate is the
last probe. A figure measured against the simulator is a property of the simulator, never of
SGLang, and the report says so loudly.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

# A probe is best-effort: a router may not serve /server_info; never delay the run for long.
PROBE_TIMEOUT_S = 3.0
_SIM_GAUGE_RE = re.compile(r"^sglnode_simulated(?:\{[^}]*\})?\s+1(?:\.0+)?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base_url: str


def parse_url(url: str) -> Endpoint:
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"--url must be http://host:port (got {url!r}); TLS is not supported")
    if not parts.hostname:
        raise ValueError(f"--url has no host: {url!r}")
    port = parts.port or 80
    return Endpoint(parts.hostname, port, f"http://{parts.netloc}")


# The smallest generation that passes through a router to a worker (and, for PD, both sides).
ONE_TOKEN_GENERATE = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1}}).encode()


def _get(url: str, api_key: str | None, data: bytes | None = None) -> str | None:
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
            return response.read(1 << 20).decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _says_simulated(body: str) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
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
        except (ValueError, AttributeError):
            pass
    metrics = _get(f"{base_url}/metrics", api_key)
    if metrics and _SIM_GAUGE_RE.search(metrics):
        evidence.append("/metrics has sglnode_simulated 1")
    if not evidence:
        generated = _get(f"{base_url}/generate", api_key, ONE_TOKEN_GENERATE)
        if generated and _says_simulated(generated):
            evidence.append('a one-token /generate answered with "simulated": true')
    return {"simulated": bool(evidence), "evidence": evidence}
