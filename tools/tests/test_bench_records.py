import pytest

from sglnode.bench.records import GapSink, build_record, derive_gaps


def _record(**overrides):
    fields = dict(
        start=10.0,
        end=11.0,
        times=[10.2, 10.4, 11.0],
        tokens=[1, 2, 1],
        chunks=[1, 1, 1],
        reported_tokens=None,
        prompt_tokens=5,
        requested_tokens=4,
        per_chunk_counts=True,
        error=None,
    )
    fields.update(overrides)
    return build_record(**fields)


def test_a_chunk_of_k_tokens_yields_one_gap_and_k_minus_1_zero_gaps():
    itl, gaps = GapSink(), GapSink()
    derive_gaps([1.0, 1.5, 2.5], [3, 1, 4], [1, 1, 2], itl, gaps)
    assert itl.nonzero == pytest.approx([0.5, 1.0])
    assert itl.zeros == 2 + 0 + 3
    assert itl.count == 8 - 1  # n tokens give n-1 inter-token gaps
    assert gaps.nonzero == pytest.approx([0.5, 1.0]) and gaps.zeros == 1


def test_arrivals_without_tokens_do_not_produce_itl_samples():
    itl, gaps = GapSink(), GapSink()
    derive_gaps([1.0, 1.2, 1.4], [0, 1, 1], [1, 1, 1], itl, gaps)
    assert itl.nonzero == pytest.approx([0.2]) and itl.zeros == 0
    assert len(gaps.nonzero) == 2


def test_ttft_e2e_and_tpot_follow_their_definitions():
    record = _record()
    assert record.ok
    assert record.ttft_s == pytest.approx(0.2)
    assert record.e2e_s == pytest.approx(1.0)
    assert record.output_tokens == 4 and record.token_source == "arrived"
    assert record.tpot_s == pytest.approx((1.0 - 0.2) / 3)


def test_server_count_wins_over_arrivals_and_is_kept_apart():
    record = _record(reported_tokens=9)
    assert record.output_tokens == 9 and record.arrived_tokens == 4 and record.token_source == "server"


def test_a_stream_without_tokens_is_an_error():
    record = _record(times=[], tokens=[], chunks=[])
    assert not record.ok and record.error == "no_tokens" and record.tpot_s is None


def test_a_failed_request_keeps_its_partial_counts_but_no_e2e():
    record = _record(error="disconnected_mid_stream")
    assert not record.ok and record.e2e_s is None and record.arrived_tokens == 4
    assert record.to_json()["error"] == "disconnected_mid_stream"
