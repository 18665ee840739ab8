import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from bench_fake_server import Behaviour, FakeServer

from sglnode.bench.target import parse_url, probe_simulated

pytestmark = pytest.mark.timeout(30)


def test_url_parsing_accepts_http_only():
    assert parse_url("http://10.0.0.5:30000").port == 30000
    assert parse_url("http://router").port == 80
    with pytest.raises(ValueError, match="TLS"):
        parse_url("https://x:1")


@pytest.mark.parametrize("simulated", [True, False])
def test_simulator_is_recognised_from_its_endpoints(simulated):
    with FakeServer(Behaviour(simulated=simulated)) as server:
        found = probe_simulated(server.url, None)
    assert found["simulated"] is simulated
    assert len(found["evidence"]) == (2 if simulated else 0)


def test_an_unreachable_target_is_not_called_simulated():
    with FakeServer(Behaviour()) as server:
        url = server.url
    assert probe_simulated(url, None) == {"simulated": False, "evidence": []}


class _RouterLike(BaseHTTPRequestHandler):
    """Like sglang-router in front of the simulator: no /server_info or /metrics of its own."""

    simulated = True

    def do_GET(self):
        self.send_response(404)
        self.end_headers()

    def do_POST(self):
        body = {"text": " x", "meta_info": {"completion_tokens": 1, "simulated": self.simulated}}
        payload = json.dumps(body).encode() if self.path == "/generate" else b"{}"
        self.send_response(200 if self.path == "/generate" else 404)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("simulated", [True, False])
def test_simulator_behind_a_router_is_recognised_from_a_one_token_generation(simulated):
    handler = type("Handler", (_RouterLike,), {"simulated": simulated})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        found = probe_simulated(f"http://127.0.0.1:{server.server_address[1]}", None)
    finally:
        server.shutdown()
        server.server_close()
    assert found["simulated"] is simulated
    assert found["evidence"] == (
        ['a one-token /generate answered with "simulated": true'] if simulated else []
    )
