"""A scriptable stand-in for SGLang's readiness endpoints, on 127.0.0.1 port 0, for client/wait tests.

`routes` maps "GET /path" or "POST /path" to a list of (status, body) answers; each request takes
the next answer and the last one repeats. Unlisted routes answer 404. Every request is recorded.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = tuple[int, str]


class FakeSGLang:
    def __init__(self, routes: dict[str, list[Answer]]) -> None:
        self.routes = {key: list(answers) for key, answers in routes.items()}
        self.requests: list[tuple[str, str, bytes]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fake.requests.append((method, self.path, body))
                answers = fake.routes.get(f"{method} {self.path}")
                status, text = (404, "not found") if not answers else answers[0]
                if answers and len(answers) > 1:
                    answers.pop(0)
                payload = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    def __enter__(self) -> FakeSGLang:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def paths(self) -> list[str]:
        return [f"{method} {path}" for method, path, _ in self.requests]


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
