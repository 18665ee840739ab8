"""sglnode sim's HTTP API, served in-process on an ephemeral loopback port."""

import asyncio
import io
import itertools
import json

import aiohttp
from aiohttp import web

from sglnode.pins import PINS
from sglnode.sim.config import SimConfig, parse_faults
from sglnode.sim.engine import ROOM_READY, SimEngine
from sglnode.sim.http_api import build_app, build_bootstrap_app
from sglnode.sim.log import SimLog
from sglnode.sim.startup import plan_for

TIMEOUT = aiohttp.ClientTimeout(total=20)
METRIC_NAMES = (
    "sglang:num_running_reqs",
    "sglang:num_used_tokens",
    "sglang:token_usage",
    "sglang:gen_throughput",
    "sglang:num_queue_reqs",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    "sglang:time_to_first_token_seconds_bucket",
    "sglang:inter_token_latency_seconds_bucket",
    "sglang:e2e_request_latency_seconds_count",
)


def make_engine(faults="", time_scale=0.0, **args):
    flags = {
        "model_path": "/models/DeepSeek-V4-Flash",
        "served_model_name": "dsv4-flash",
        "tp_size": "4",
        "mem_fraction_static": "0.85",
        "enable_metrics": True,
        **args,
    }
    config = SimConfig(args=flags, time_scale=time_scale, faults=parse_faults(faults))
    engine = SimEngine(config, plan_for(config), SimLog(io.StringIO()), max_running_requests=64)
    engine.ready = True
    return engine


async def _serve(app):
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def run_with_server(engine, scenario):
    """Serve the sim app on an ephemeral port and run `scenario(session, base_url)` against it."""

    async def main():
        runner, base = await _serve(build_app(engine))
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
                return await asyncio.wait_for(scenario(session, base), timeout=30)
        finally:
            await engine.close()
            await runner.cleanup()

    return asyncio.run(main())


async def sse_events(response):
    events = []
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_health_info_and_models():
    engine = make_engine()

    async def scenario(session, base):
        results = {}
        for path in ("/health", "/health_generate", "/v1/models", "/model_info", "/get_model_info"):
            async with session.get(base + path) as response:
                results[path] = (response.status, await response.text())
        for path in ("/server_info", "/get_server_info"):
            async with session.get(base + path) as response:
                results[path] = (response.status, await response.json())
        return results

    results = run_with_server(engine, scenario)
    assert results["/health"][0] == 200 and results["/health_generate"][0] == 200
    models = json.loads(results["/v1/models"][1])
    assert models["data"][0]["id"] == "dsv4-flash" and models["data"][0]["simulated"] is True
    for path in ("/model_info", "/get_model_info"):
        info = json.loads(results[path][1])
        assert info["model_path"] == "/models/DeepSeek-V4-Flash" and info["simulated"] is True
    for path in ("/server_info", "/get_server_info"):
        status, info = results[path]
        assert status == 200 and info["simulated"] is True
        assert info["tp_size"] == 4 and info["version"] == PINS.sglang
        assert info["internal_states"][0]["max_total_num_tokens"] == engine.plan.kv_tokens


def test_health_is_503_until_ready():
    engine = make_engine()
    engine.ready = False

    async def scenario(session, base):
        async with session.get(base + "/health") as response:
            return response.status

    assert run_with_server(engine, scenario) == 503


def test_generate_non_streaming_reports_meta_info():
    engine = make_engine()

    async def scenario(session, base):
        body = {"text": "abcd" * 10, "sampling_params": {"max_new_tokens": 7}}  # 4 chars per token
        async with session.post(base + "/generate", json=body) as response:
            return response.status, await response.json()

    status, data = run_with_server(engine, scenario)
    meta = data["meta_info"]
    assert status == 200
    assert meta["completion_tokens"] == 7 and meta["prompt_tokens"] == 10
    assert meta["finish_reason"] == {"type": "length", "length": 7}
    assert meta["simulated"] is True
    assert len(data["text"].split()) == 7


def test_generate_streams_cumulative_text_then_done():
    engine = make_engine()

    async def scenario(session, base):
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}, "stream": True}
        async with session.post(base + "/generate", json=body) as response:
            return response.headers["Content-Type"], await sse_events(response)

    content_type, events = run_with_server(engine, scenario)
    assert content_type.startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
    assert all(later["text"].startswith(earlier["text"]) for earlier, later in itertools.pairwise(chunks))
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert chunks[0]["meta_info"]["prompt_tokens"] == 3


def test_chat_completions_stream_with_usage():
    engine = make_engine()

    async def scenario(session, base):
        body = {
            "model": "dsv4-flash",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with session.post(base + "/v1/chat/completions", json=body) as response:
            return await sse_events(response)

    events = run_with_server(engine, scenario)
    assert events[-1] == "[DONE]"
    deltas = [e for e in events[:-1] if e["choices"]]
    assert len(deltas) == 3 and all(e["object"] == "chat.completion.chunk" for e in deltas)
    assert deltas[-1]["choices"][0]["finish_reason"] == "length"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3


def test_chat_and_completions_non_streaming():
    engine = make_engine()

    async def scenario(session, base):
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        async with session.post(base + "/v1/chat/completions", json=chat) as response:
            chat_data = await response.json()
        completion = {"prompt": "abc", "max_tokens": 5}
        async with session.post(base + "/v1/completions", json=completion) as response:
            completion_data = await response.json()
        async with session.post(base + "/v1/completions", json={"prompt": "abc"}) as response:
            default_data = await response.json()
        async with session.post(base + "/v1/chat/completions", json={"messages": []}) as response:
            bad_status = response.status
        return chat_data, completion_data, default_data, bad_status

    chat_data, completion_data, default_data, bad_status = run_with_server(engine, scenario)
    assert chat_data["object"] == "chat.completion" and chat_data["usage"]["completion_tokens"] == 2
    assert chat_data["choices"][0]["message"]["role"] == "assistant"
    assert (
        completion_data["object"] == "text_completion" and completion_data["usage"]["completion_tokens"] == 5
    )
    assert default_data["usage"]["completion_tokens"] == 16  # OpenAI's default max_tokens
    assert bad_status == 400


def test_continuous_usage_stats_put_usage_on_every_chunk():
    engine = make_engine()

    async def scenario(session, base):
        body = {
            "prompt": [5, 6, 7, 8],
            "max_tokens": 3,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        async with session.post(base + "/v1/completions", json=body) as response:
            return await sse_events(response)

    events = run_with_server(engine, scenario)
    token_chunks = [e for e in events[:-1] if e["choices"]]
    assert [c["usage"]["completion_tokens"] for c in token_chunks] == [1, 2, 3]
    assert all(c["usage"]["prompt_tokens"] == 4 for c in token_chunks)


def test_completions_stream_without_usage_has_no_usage_chunk():
    engine = make_engine()

    async def scenario(session, base):
        body = {"prompt": "abc", "max_tokens": 2, "stream": True}
        async with session.post(base + "/v1/completions", json=body) as response:
            return await sse_events(response)

    events = run_with_server(engine, scenario)
    assert len(events) == 3 and events[-1] == "[DONE]"
    assert all(e["choices"] for e in events[:-1])


def test_metrics_use_sglang_names_and_count_tokens():
    engine = make_engine()

    async def scenario(session, base):
        body = {"text": "abcdefgh", "sampling_params": {"max_new_tokens": 5}}
        async with session.post(base + "/generate", json=body) as response:
            await response.read()
        async with session.get(base + "/metrics") as response:
            return await response.text()

    text = run_with_server(engine, scenario)
    assert "sglnode_simulated 1" in text
    for name in METRIC_NAMES:
        assert name in text, name
    assert 'sglang:generation_tokens_total{model_name="dsv4-flash",engine_type="unified"' in text
    generated = next(line for line in text.splitlines() if line.startswith("sglang:generation_tokens_total"))
    assert float(generated.rsplit(" ", 1)[1]) == 5


def test_metrics_are_404_without_enable_metrics():
    engine = make_engine(enable_metrics=False)

    async def scenario(session, base):
        async with session.get(base + "/metrics") as response:
            return response.status

    assert run_with_server(engine, scenario) == 404


def test_api_key_is_required_except_for_health():
    engine = make_engine(api_key="s3cret")

    async def scenario(session, base):
        async with session.get(base + "/v1/models") as response:
            denied = response.status
        async with session.get(base + "/v1/models", headers={"Authorization": "Bearer s3cret"}) as response:
            allowed = response.status
        async with session.get(base + "/health") as response:
            health = response.status
        return denied, allowed, health

    assert run_with_server(engine, scenario) == (401, 200, 200)


def test_tokens_are_paced_by_the_roofline():
    # time_scale chosen so 10 tokens at batch 1 take ~0.5 s of wall time.
    probe = make_engine(time_scale=1.0)
    scale = 0.05 / probe.step_seconds(1)
    engine = make_engine(time_scale=scale)

    async def scenario(session, base):
        loop = asyncio.get_running_loop()
        start = loop.time()
        body = {"text": "x", "sampling_params": {"max_new_tokens": 11}}
        async with session.post(base + "/generate", json=body) as response:
            await response.read()
        return loop.time() - start

    elapsed = run_with_server(engine, scenario)
    assert 0.45 <= elapsed < 5.0


def test_max_running_requests_queues_the_rest():
    engine = make_engine(time_scale=0.0)
    engine.max_running_requests = 1
    probe = make_engine(time_scale=1.0)
    engine.config = SimConfig(
        args=engine.config.args, time_scale=0.02 / probe.step_seconds(1), faults=parse_faults("")
    )
    seen = []

    async def scenario(session, base):
        async def one():
            body = {"text": "x", "sampling_params": {"max_new_tokens": 10}}
            async with session.post(base + "/generate", json=body) as response:
                return await response.json()

        tasks = [asyncio.create_task(one()) for _ in range(3)]
        await asyncio.sleep(0.05)
        seen.append((engine.running, engine.queued))
        await asyncio.gather(*tasks)
        seen.append((engine.running, engine.queued))

    run_with_server(engine, scenario)
    assert seen[0] == (1, 2)
    assert seen[1] == (0, 0)


# --- PD: the decode side waits for the prefill side's KV --------------------------------------------
def run_pd(prefill, decode, scenario):
    async def main():
        prefill_runner, prefill_base = await _serve(build_app(prefill))
        boot_runner, boot_base = await _serve(build_bootstrap_app(prefill))
        decode_runner, decode_base = await _serve(build_app(decode))
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
                return await asyncio.wait_for(
                    scenario(session, prefill_base, boot_base, decode_base), timeout=30
                )
        finally:
            for engine in (prefill, decode):
                await engine.close()
            for runner in (decode_runner, boot_runner, prefill_runner):
                await runner.cleanup()

    return asyncio.run(main())


def test_pd_decode_generates_after_the_prefill_side_sends_kv():
    prefill = make_engine(disaggregation_mode="prefill")
    decode = make_engine(disaggregation_mode="decode")

    async def scenario(session, prefill_base, boot_base, decode_base):
        port = int(boot_base.rsplit(":", 1)[1])
        body = {
            "text": "hello",
            "sampling_params": {"max_new_tokens": 6},
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": port,
            "bootstrap_room": 42,
        }
        decode_task = asyncio.create_task(session.post(decode_base + "/generate", json=body))
        await asyncio.sleep(0.1)
        pending = decode_task.done()
        async with session.post(prefill_base + "/generate", json=body) as response:
            prefill_data = await response.json()
        decode_response = await decode_task
        decode_data = await decode_response.json()
        decode_response.release()
        async with session.get(boot_base + "/sglnode_sim/kv/42") as response:
            room = await response.json()
        return pending, prefill_data, decode_data, room

    pending, prefill_data, decode_data, room = run_pd(prefill, decode, scenario)
    assert pending is False  # decode was waiting for the prefill side
    assert prefill_data["meta_info"]["completion_tokens"] == 1
    assert decode_data["meta_info"]["completion_tokens"] == 6
    assert room["state"] == ROOM_READY


def test_pd_kv_transfer_failure_fails_generation_but_keeps_health():
    prefill = make_engine(disaggregation_mode="prefill", faults="kv_transfer_fail")
    decode = make_engine(disaggregation_mode="decode")

    async def scenario(session, prefill_base, boot_base, decode_base):
        port = int(boot_base.rsplit(":", 1)[1])
        body = {
            "text": "hello",
            "sampling_params": {"max_new_tokens": 6},
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": port,
            "bootstrap_room": 7,
            "stream": True,
        }
        decode_task = asyncio.create_task(session.post(decode_base + "/generate", json=body))
        async with session.post(prefill_base + "/generate", json=body) as response:
            await response.read()
        decode_response = await decode_task
        status, text = decode_response.status, await decode_response.text()
        decode_response.release()
        statuses = []
        for base in (prefill_base, decode_base):
            async with session.get(base + "/health") as response:
                statuses.append(response.status)
        return status, text, statuses

    status, text, statuses = run_pd(prefill, decode, scenario)
    assert status == 500 and "KVTransferError" in text
    assert statuses == [200, 200]
