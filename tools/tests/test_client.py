import json

import pytest
from fake_sglang_http import FakeSGLang, closed_port_url

from sglnode.readiness.client import PING_REQUEST, Readiness, SGLangClient, parse_metrics


def test_health_generate_503_then_200_moves_from_starting_to_ready():
    routes = {"GET /health_generate": [(503, "starting"), (200, "")]}
    with FakeSGLang(routes) as fake:
        client = SGLangClient(fake.url)
        first, second = client.readiness(), client.readiness()
    assert (first.readiness, first.status) == (Readiness.STARTING, 503)
    assert (second.readiness, second.status, second.endpoint) == (Readiness.READY, 200, "/health_generate")


def test_missing_health_generate_falls_back_to_health():
    with FakeSGLang({"GET /health": [(200, "ok")]}) as fake:
        probe = SGLangClient(fake.url).readiness()
        assert fake.paths() == ["GET /health_generate", "GET /health"]
    assert probe.readiness is Readiness.READY
    assert probe.endpoint == "/health"


def test_nothing_listening_is_unreachable_not_starting():
    probe = SGLangClient(closed_port_url(), timeout=1.0).readiness()
    assert probe.readiness is Readiness.UNREACHABLE
    assert probe.status is None


def test_pd_readiness_is_one_real_tiny_generation_through_the_router():
    with FakeSGLang({"POST /generate": [(200, '{"text": "!"}')]}) as fake:
        probe = SGLangClient(fake.url).readiness(pd=True)
        method, path, body = fake.requests[0]
    assert probe.readiness is Readiness.READY
    assert (method, path) == ("POST", "/generate")
    assert json.loads(body) == PING_REQUEST
    assert PING_REQUEST["sampling_params"]["max_new_tokens"] == 1


def test_pd_generation_failing_is_not_ready():
    with FakeSGLang({"POST /generate": [(500, "KVTransferError")]}) as fake:
        probe = SGLangClient(fake.url).readiness(pd=True)
    assert probe.readiness is Readiness.STARTING
    assert "KVTransferError" in probe.detail


def test_server_info_falls_back_to_the_older_endpoint_and_model_info_parses():
    routes = {
        "GET /get_server_info": [(200, '{"tp_size": 8}')],
        "GET /model_info": [(200, '{"model_path": "/m", "is_generation": true}')],
    }
    with FakeSGLang(routes) as fake:
        client = SGLangClient(fake.url)
        assert client.server_info() == {"tp_size": 8}
        assert client.model_info()["model_path"] == "/m"


def test_client_ignores_proxy_environment_for_node_addresses(monkeypatch):
    monkeypatch.setenv("http_proxy", closed_port_url())
    monkeypatch.setenv("HTTP_PROXY", closed_port_url())
    with FakeSGLang({"GET /health_generate": [(200, "")]}) as fake:
        assert SGLangClient(fake.url).readiness().readiness is Readiness.READY


def test_metrics_parse_labelled_and_plain_samples_and_skip_comments():
    text = "\n".join(
        [
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{model_name="m",engine_type="unified"} 3.0',
            "sglang:token_usage 0.25",
            "garbage_without_value",
        ]
    )
    values = parse_metrics(text)
    assert values == {
        'sglang:num_running_reqs{model_name="m",engine_type="unified"}': 3.0,
        "sglang:token_usage": 0.25,
    }


@pytest.mark.parametrize("body", ["", "\n\n"])
def test_metrics_of_empty_body_are_empty(body):
    assert parse_metrics(body) == {}
