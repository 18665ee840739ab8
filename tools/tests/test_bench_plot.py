import pytest

from sglnode.bench.plot import plot_sweep


def _stage(c, tok_s):
    dist = {"p50": 1.0 + c, "p99": 2.0 + c}
    return {
        "concurrency": c,
        "request_rate": None,
        "output_tok_s": tok_s,
        "ttft_ms": dist,
        "itl_ms": dist,
        "tpot_ms": dist,
        "roofline": {"roofline_decode_tok_s": tok_s * 2},
    }


@pytest.mark.timeout(60)
def test_sweep_plot_is_a_png(tmp_path):
    path = tmp_path / "sweep.png"
    plot_sweep([_stage(1, 100.0), _stage(8, 700.0)], path, simulated=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
