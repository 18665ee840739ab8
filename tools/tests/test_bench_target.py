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
