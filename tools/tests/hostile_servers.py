"""Hostile HTTP peers on 127.0.0.1 port 0 for the hostile-input tests (issue 16).

Each reads whatever request arrives and then misbehaves in one named way: never answer, drop the
connection, send a status line that is not HTTP, or answer 200 with a fixed raw body (a body that
is not SSE but holds the markers a lax scanner counts). Threads, no event loop, so a test can run
one next to a command that runs its own.
"""

from __future__ import annotations

import contextlib
import socket
import threading

NOT_SSE_BODY = (
    b'{"text": "x", "meta_info": {"completion_tokens":999999}}\n'
    b'"text":"y" "completion_tokens":999999 data: [DONE]\n\ndata: [DONE]\n\n'
)


def raw_response(body: bytes, content_type: bytes = b"text/html") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


class HostileServer:
    """mode: "silent" | "close" (FIN) | "drop" (RST) | "bad_status" | "raw" (answer with `payload`)."""

    def __init__(self, mode: str, payload: bytes = b"") -> None:
        self.mode = mode
        self.payload = payload
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.sock.close()
        for conn in self._open:
            with contextlib.suppress(OSError):
                conn.close()
        self._thread.join(5)

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        self._open.append(conn)
        conn.settimeout(0.5)
        try:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                if self.mode == "silent":
                    continue
                if self.mode == "close":
                    conn.close()
                    return
                if self.mode == "drop":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    conn.close()
                    return
                if self.mode == "bad_status":
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
                    conn.close()
                    return
                conn.sendall(self.payload)
        except OSError:
            return
