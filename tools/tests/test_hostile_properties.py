"""Issue 16: property tests over what a hostile peer can send (hypothesis, bounded to ~30 s).

- HTTP responses (random bytes, SSE-ish bodies with one deliberate defect, split into random reads)
  fed to the bench's stream parser: it never raises, and never counts a malformed response as ok;
  a well-formed SGLang stream is ok however it is split.
- Log text fed to `sglnode diagnose` and to the waiter: never an exception, exit codes in the
  documented sets.
"""

from __future__ import annotations

import asyncio
import io
import json
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglnode.bench.httpstream import StreamProtocol
from sglnode.cli import main
from sglnode.readiness.logwatch import ExitInfo, LogEvent
from sglnode.readiness.waiter import WaitOptions, wait_for_server

REQUESTED = 16
# Explicit budgets: the whole module stays well under a minute on a loaded runner.
PARSER = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LOGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def feed(response: bytes, cuts: list[int], api: str = "generate") -> str | None:
    """The verdict of the stream parser on one response delivered in reads cut at `cuts`."""

    async def go() -> str | None:
        proto = StreamProtocol(api)  # type: ignore[arg-type]
        proto.connection_made(_Transport())  # type: ignore[arg-type]
        waiter = proto.begin(asyncio.get_running_loop(), b"POST / HTTP/1.1\r\n\r\n", REQUESTED)
        last = 0
        for cut in [*sorted(c % (len(response) + 1) for c in cuts), len(response)]:
            if cut > last:
                proto.data_received(response[last:cut])
                last = cut
        if not waiter.done():
            proto.connection_lost(None)  # the peer closes: a close-delimited body ends here
        error, _ = await waiter
        return error

    return asyncio.run(go())


def http(body: bytes, content_type: bytes = b"text/event-stream", chunked: bool = True) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\n"
    if chunked:
        return (
            head
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
    return head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def good_events(n: int) -> list[bytes]:
    return [
        b"data: "
        + json.dumps({"text": "x" * i, "meta_info": {"completion_tokens": i, "prompt_tokens": 3}}).encode()
        + b"\n\n"
        for i in range(1, n + 1)
    ]


DONE = b"data: [DONE]\n\n"
_not_a_field = st.text(min_size=1, max_size=30).filter(
    lambda t: "\n" not in t and "\r" not in t and not t.startswith((":", "data:"))
)
# One defect each; every one makes the response malformed whatever surrounds it.
DEFECTS = st.one_of(
    st.builds(lambda t: f"{t}\n\n".encode(), _not_a_field),  # a line that is no SSE field
    st.builds(
        lambda v: b"data: " + json.dumps(v).encode() + b"\n\n",
        st.one_of(st.integers(), st.lists(st.integers()), st.text()),
    ),
    st.builds(
        lambda d: b"data: " + json.dumps(d).encode()[:-1] + b"\n\n",
        st.fixed_dictionaries({"text": st.text()}),
    ),
    st.builds(lambda b: b"data: \x00" + b.replace(b"\n", b"") + b"\n\n", st.binary(max_size=40)),
    st.just(b'data: {"text": "x", "meta_info": {"completion_tokens": 999999}}\n\n'),  # over requested
    st.just(b'data: {"text": "x", "meta_info": {"completion_tokens": -1}}\n\n'),
    st.just(b'data: {"choices": [{"text": "x"}]}\n\n'),  # another API's shape
)


@PARSER
@given(
    n=st.integers(1, REQUESTED),
    defect=DEFECTS,
    where=st.integers(0, REQUESTED),
    done=st.booleans(),
    chunked=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_a_response_with_a_defect_is_never_ok(n, defect, where, done, chunked, cuts):
    events = good_events(n)
    events.insert(where % (n + 1), defect)
    body = b"".join(events) + (DONE if done else b"")
    assert feed(http(body, chunked=chunked), cuts) is not None


@PARSER
@given(
    n=st.integers(1, REQUESTED),
    crlf=st.booleans(),
    chunked=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_a_well_formed_stream_is_ok_however_it_is_split(n, crlf, chunked, cuts):
    body = b"".join(good_events(n)) + DONE
    if crlf:
        body = body.replace(b"\n", b"\r\n")
    assert feed(http(body, chunked=chunked), cuts) is None


@PARSER
@given(
    body=st.binary(max_size=400),
    content_type=st.sampled_from([b"text/event-stream", b"text/html", b"application/json"]),
    framed=st.sampled_from(["chunked", "length", "raw"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    api=st.sampled_from(["generate", "completions", "chat"]),
)
def test_random_bytes_never_crash_the_parser_nor_pass_as_a_generation(body, content_type, framed, cuts, api):
    response = body if framed == "raw" else http(body, content_type, chunked=framed == "chunked")
    error = feed(response, cuts, api)
    if error is None:  # only a real SSE stream of the API's shape, ended by [DONE], may pass
        assert content_type == b"text/event-stream" and b"[DONE]" in body and b"data:" in body


# --- log text ----------------------------------------------------------------------------------
SGLANG_WORDS = [
    "[2026-11-29 09:40:01 TP0] Load weight begin. avail mem=93.61 GB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "[2026-11-29 09:40:33] kill_process_tree called: parent_pid=1, include_parent=True, pid=1",
    "The server is fired up and ready to roll!",
    "Capture target decode CUDA graph begin.",
    "RuntimeError: NCCL error: unhandled system error",
    '  File "/sgl/model_runner.py", line 1, in load_model',
    "Scheduler hit an exception: Traceback (most recent call last):",
]
LOG_LINES = st.lists(
    st.one_of(
        st.sampled_from(SGLANG_WORDS),
        st.text(max_size=200),
        st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    ),
    max_size=25,
)


class ListFollower:
    name = "container:hypothesis"

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def follow(self, stop: threading.Event) -> Iterator[LogEvent]:
        for number, line in enumerate(self.lines, 1):
            yield LogEvent(0.0, number, line)

    def exit_info(self) -> ExitInfo | None:
        return ExitInfo(1, "exited 1")


@LOGS
@given(lines=LOG_LINES)
def test_any_log_text_gets_a_diagnosis_never_a_traceback(lines):
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        log.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        stdout, stderr = io.StringIO(), io.StringIO()
        import contextlib  # noqa: PLC0415

        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["diagnose", str(log)])
    assert code in {0, 1}
    assert "Traceback" not in stderr.getvalue()


@LOGS
@given(lines=LOG_LINES)
def test_any_log_text_ends_the_waiter_with_a_documented_outcome(lines):
    result = wait_for_server(
        WaitOptions(url=None, follower=ListFollower(lines), timeout_s=10, gpu_memory_reader=lambda: None)
    )
    assert result.exit_code in {0, 2, 3, 4}
    json.dumps(result.to_json())  # the --json output can always be written
