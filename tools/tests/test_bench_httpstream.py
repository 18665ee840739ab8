"""The streaming client against a loopback server with injected behaviour (bench_fake_server)."""

import asyncio

import pytest
from bench_fake_server import Behaviour, FakeServer

from sglnode.bench.apis import API_PATHS, BodyOptions, build_body
from sglnode.bench.httpstream import StreamClient, StreamProtocol
from sglnode.bench.records import GapSink

pytestmark = pytest.mark.timeout(30)


def _request(server, api="generate", output_len=16, api_key=None):
    body = build_body(api, [1000, 1001], "hello", output_len, BodyOptions("default", True, True))
    head = f"POST {API_PATHS[api]} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    if api_key:
        head += f"Authorization: Bearer {api_key}\r\n"
    return (head + "\r\n").encode() + body


def _run(server, api="generate", n=1, output_len=16, stall_s=5.0):
    """n sequential requests on one client slot; returns (records, itl sink, chunk-gap sink)."""

    async def go():
        client = StreamClient("127.0.0.1", server.port, api, connect_timeout_s=2)
        itl, gaps = GapSink(), GapSink()
        records = []
        for _ in range(n):
            request = client.request(_request(server, api, output_len), output_len, itl, gaps)
            record, _ = await asyncio.wait_for(request, 10)
            records.append(record)
        client.close()
        return records, itl, gaps

    return asyncio.run(go())


# How late a busy host may hand the client a chunk the server wrote (CI runs pytest beside image
# builds on 2 cores: 11 ms was seen). Kept under one inter-token gap, so a client that timed the
# wrong token (the second one) still fails.
READ_LATE_S = 0.04
PACED_ITL_S = 0.05


@pytest.mark.parametrize("api", ["generate", "completions", "chat"])
def test_paced_tokens_give_the_injected_ttft_and_exact_counts(api):
    with FakeServer(Behaviour(ttft_s=0.5, itl_s=PACED_ITL_S)) as server:
        records, itl, _gaps = _run(server, api, output_len=12)
        true_ttft = server.first_token_sent[0] - records[0].start_s
        true_decode = server.last_token_sent[0] - server.first_token_sent[0]
    record = records[0]
    assert record.ok, record.error
    assert record.output_tokens == 12
    assert record.token_source == "server"
    assert record.prompt_tokens == 7
    # Not before the server wrote the first token, and not as late as its second one.
    assert true_ttft <= record.ttft_s <= true_ttft + READ_LATE_S
    assert record.ttft_s == pytest.approx(0.5, rel=0.1)
    assert itl.count == 11 and itl.zeros == 0
    # The ITL samples add up to the client's first-to-last token time: the decode time the server
    # took, less how late the first token arrived (measured above), plus how late the last one did.
    first_late = record.ttft_s - true_ttft
    assert true_decode - first_late - 1e-6 <= sum(itl.nonzero) <= true_decode + READ_LATE_S


def test_multi_token_chunks_give_per_token_itl_with_zero_gaps():
    behaviour = Behaviour(ttft_s=0.05, itl_s=0.02, chunk_tokens=4)
    with FakeServer(behaviour) as server:
        records, itl, gaps = _run(server, "completions", output_len=16)
    record = records[0]
    assert record.output_tokens == 16 and record.arrived_tokens == 16
    assert record.per_chunk_counts
    # 4 chunks of 4 tokens: 3 chunk gaps, and each chunk's other 3 tokens arrive with it.
    assert len(itl.nonzero) == 3 and itl.zeros == 12
    assert len(gaps.nonzero) == 3 and gaps.zeros == 0
    assert record.tpot_s == pytest.approx(sum(itl.nonzero) / 15, rel=0.05)


def test_multi_token_chunks_without_per_chunk_usage_are_reported_as_mismatch():
    behaviour = Behaviour(chunk_tokens=4, usage="final", itl_s=0.01)
    with FakeServer(behaviour) as server:
        records, _, _ = _run(server, "chat", output_len=16)
    record = records[0]
    assert record.output_tokens == 16  # from the final usage chunk
    assert record.arrived_tokens == 4  # four content chunks
    assert not record.per_chunk_counts


@pytest.mark.parametrize("api", ["generate", "completions", "chat"])
def test_missing_usage_counts_what_arrived_never_the_requested_length(api):
    with FakeServer(Behaviour(usage="none", tokens=5)) as server:
        records, _, _ = _run(server, api, output_len=50)
    record = records[0]
    assert record.ok, record.error
    assert record.token_source == "arrived"
    assert record.output_tokens == 5


def test_early_stop_reports_the_server_count():
    with FakeServer(Behaviour(tokens=3)) as server:
        records, _, _ = _run(server, "generate", output_len=40)
    assert records[0].ok
    assert records[0].output_tokens == 3
    assert records[0].requested_tokens == 40


def test_mid_stream_disconnect_is_an_error_with_a_reason():
    with FakeServer(Behaviour(disconnect_after_tokens=3, itl_s=0.005)) as server:
        records, itl, _ = _run(server, "generate", output_len=10)
    record = records[0]
    assert not record.ok
    assert record.error.startswith(("disconnected_mid_stream", "connection_reset"))
    assert record.arrived_tokens == 3
    assert itl.count == 0  # a failed request contributes no latency samples


def test_http_503_is_an_error_carrying_the_body():
    with FakeServer(Behaviour(error_status=503)) as server:
        records, _, _ = _run(server, "chat", n=2)
    assert [r.error for r in records] == ['http_503: {"error": "overloaded"}'] * 2


def test_keep_alive_connection_is_reused_across_requests():
    with FakeServer(Behaviour()) as server:
        records, _, _ = _run(server, "generate", n=5, output_len=4)
        opened = len(server.headers)
    assert all(r.ok for r in records)
    assert opened == 5


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_events_split_across_reads_are_counted_once(framing):
    behaviour = Behaviour(split_writes=True, framing=framing)
    with FakeServer(behaviour) as server:
        records, _itl, _ = _run(server, "completions", n=2, output_len=6)
    assert [r.output_tokens for r in records] == [6, 6]
    assert [r.arrived_tokens for r in records] == [6, 6]
    assert all(r.ok for r in records)


def test_connection_refused_is_a_connect_failure():
    with FakeServer(Behaviour()) as server:
        port = server.port

    async def go():
        client = StreamClient("127.0.0.1", port, "generate", connect_timeout_s=2)
        return await client.request(b"POST / HTTP/1.1\r\n\r\n", 4, GapSink(), GapSink())

    record, connect_failed = asyncio.run(go())
    assert connect_failed
    assert record.error.startswith("connect_failed")


class _Transport:
    def __init__(self):
        self.written = b""

    def write(self, data):
        self.written += data

    def abort(self):
        pass

    def close(self):
        pass


def _chunked(events, eol="\n"):
    body = b""
    for event in events:
        data = f"data: {event}{eol}{eol}".encode()
        body += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + body + b"0\r\n\r\n"


def _feed(response, piece, api="completions"):
    """Feed a raw response to a protocol `piece` bytes at a time; return (error, protocol)."""

    async def go():
        proto = StreamProtocol(api)
        proto.connection_made(_Transport())
        waiter = proto.begin(asyncio.get_running_loop(), b"GET / HTTP/1.1\r\n\r\n", 16)
        for i in range(0, len(response), piece):
            proto.data_received(response[i : i + piece])
        error, _ = await asyncio.wait_for(waiter, 1)
        return error, proto

    return asyncio.run(go())


STREAM = [
    '{"choices":[{"text":"a"}],"usage":null,"error":null}',
    '{"choices":[{"text":"b c"}],"usage":null}',
    '{"choices":[{"text":""}],"usage":null}',
    '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}',
    "[DONE]",
]


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 10_000])
def test_any_split_of_the_byte_stream_gives_the_same_counts(piece):
    error, proto = _feed(_chunked(STREAM), piece)
    assert error is None
    assert sum(proto.tokens) == 2 and sum(proto.chunks) == 2
    assert proto.reported == 2 and proto.prompt_tokens == 3
    # Counts only in the final usage chunk: each text event counts one token, however it was split.
    assert proto.counted is False


def test_an_error_event_in_the_stream_fails_the_request():
    events = [STREAM[0], '{"error":{"message":"boom"}}', "[DONE]"]
    error, _ = _feed(_chunked(events), 10_000)
    assert error == 'error_event: {"message": "boom"}'


def test_an_abort_finish_reason_fails_the_request():
    events = ['{"choices":[{"text":"a","finish_reason":"abort"}]}', "[DONE]"]
    error, _ = _feed(_chunked(events), 10_000)
    assert error == "server_aborted"


def test_a_stream_that_ends_without_done_is_incomplete():
    error, _ = _feed(_chunked(STREAM[:2]), 10_000)
    assert error == "stream_ended_without_done"


@pytest.mark.parametrize("piece", [3, 10_000])
def test_crlf_delimited_events_are_read_too(piece):
    error, proto = _feed(_chunked(STREAM, eol="\r\n"), piece)
    assert error is None and sum(proto.tokens) == 2 and proto.reported == 2


# --- issue 16: a response counts only when it is well-formed SSE of the API's shape -----------
def _raw(body, content_type=b"text/event-stream", framing="length"):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\n"
    if framing == "length":
        return head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    return head + b"Connection: close\r\n\r\n" + body


LAX_BAIT = b'"text":"x" "completion_tokens":999999\n\ndata: [DONE]\n\n'
GOOD_GENERATE = [
    '{"text":"a","meta_info":{"completion_tokens":1,"prompt_tokens":3}}',
    '{"text":"ab","meta_info":{"completion_tokens":2,"prompt_tokens":3}}',
    "[DONE]",
]


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (_raw(LAX_BAIT, b"text/html"), "not_sse"),
        (_raw(LAX_BAIT), "bad_sse_framing"),
        (_raw(b"data: {not json}\n\ndata: [DONE]\n\n"), "bad_event"),
        (_raw(b'data: {"text":"a"}\n\ndata: [DONE]\n\n'), "bad_event"),  # no meta_info
        (_raw(b"data: " + b"[" * 100_000 + b"\n\ndata: [DONE]\n\n"), "bad_event"),  # too deep
        (
            _raw(b'data: {"text":"a","meta_info":{"completion_tokens":999999}}\n\ndata: [DONE]\n\n'),
            "over_requested",
        ),
        (
            _raw(b'data: {"text":"","meta_info":{"completion_tokens":5}}\n\ndata: [DONE]\n\n'),
            "tokens_without_events",
        ),
        (_raw(b'data: {"text":"a","meta_info":{"completion_tokens":1}}\n\n'), "stream_ended_without_done"),
        (
            _raw(
                b'data: {"text":"a","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\ndata: [DONE]\n\n'
            ),
            "after data: [DONE]",
        ),
        (
            _raw(b'data: {"text":"a","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\ndata: {"te'),
            "inside an event",
        ),
        (
            _raw(b'event: x\ndata: {"text":"a","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\n'),
            "not a data: line",
        ),
        (
            _raw(
                b'data: {"text":"a","meta_info":{"completion_tokens":2}}\n\n'
                b'data: {"text":"ab","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\n'
            ),
            "went down",
        ),
    ],
)
@pytest.mark.parametrize("piece", [5, 100_000])
def test_a_malformed_response_is_never_ok(response, reason, piece):
    error, _proto = _feed(response, piece, api="generate")
    assert error is not None and reason in error


def test_the_strict_parser_still_accepts_sglangs_own_stream_in_any_split():
    for piece in (1, 4, 1000):
        error, proto = _feed(_chunked(GOOD_GENERATE), piece, api="generate")
        assert error is None
        assert sum(proto.tokens) == 2 and proto.reported == 2 and proto.counted


def test_comment_lines_and_data_without_a_space_are_sse_too():
    body = b': keep-alive\n\ndata:{"text":"a","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\n'
    error, proto = _feed(_raw(body), 3, api="generate")
    assert error is None and proto.reported == 1


def test_a_close_delimited_stream_is_parsed_as_strictly():
    error, _ = _feed(_raw(LAX_BAIT, framing="close"), 7, api="generate")
    # the feed ends without a close here; the malformed framing alone must already fail it
    assert error is not None and "bad_sse_framing" in error
