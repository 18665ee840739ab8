"""The simulator's radix-cache model (a test double of SGLang's) and what `sglnode bench` sees of it.

Acceptance of issue 13: a benchmark against a server that counts prefix-cache hits shows none across
warm-up, stages and workers unless the shared-prefix workload is chosen.
"""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_sim_http import make_engine, run_with_server
from test_sim_process import FLASH_TP4, sim

from sglnode.sim.prefix_cache import PrefixCache, prompt_tokens


def test_a_repeated_prompt_hits_all_but_its_last_token_and_a_new_one_misses():
    cache = PrefixCache()
    assert cache.match_and_insert((1, 2, 3, 4)) == 0
    assert cache.match_and_insert((1, 2, 3, 4)) == 3  # SGLang always computes the last token
    assert cache.match_and_insert((1, 2, 9, 9)) == 2
    assert cache.match_and_insert((7, 8)) == 0
    cache.flush()
    assert cache.match_and_insert((1, 2, 3, 4)) == 0 and cache.flushes == 1


def test_the_cache_is_bounded():
    cache = PrefixCache(capacity_tokens=10)
    for start in range(0, 100, 4):
        cache.match_and_insert(tuple(range(start, start + 4)))
        assert cache.size <= 10


def test_text_prompts_are_cut_into_token_sized_pieces():
    assert prompt_tokens("abcdefgh") == ("abcd", "efgh")
    assert prompt_tokens([1, 2, 3]) == (1, 2, 3)


def test_generate_reports_cached_tokens_and_flush_empties_the_cache():
    engine = make_engine()

    async def scenario(session, base):
        body = {"input_ids": list(range(100, 164)), "sampling_params": {"max_new_tokens": 2}}
        seen = []
        for _ in range(2):
            async with session.post(f"{base}/generate", json=body) as response:
                seen.append((await response.json())["meta_info"]["cached_tokens"])
        async with session.post(f"{base}/flush_cache") as response:
            flushed = response.status
        async with session.post(f"{base}/generate", json=body) as response:
            seen.append((await response.json())["meta_info"]["cached_tokens"])
        return seen, flushed

    seen, flushed = run_with_server(engine, scenario)
    assert seen == [0, 63, 0] and flushed == 200


def test_flush_is_refused_while_requests_run_as_sglang_does():
    engine = make_engine(time_scale=1.0)

    async def scenario(session, base):
        body = {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 200}}
        busy = asyncio.ensure_future(session.post(f"{base}/generate", json=body))
        await asyncio.sleep(0.3)
        async with session.post(f"{base}/flush_cache") as response:
            status, text = response.status, await response.text()
        busy.cancel()
        return status, text

    status, text = run_with_server(engine, scenario)
    assert status == 400 and "Flush cache failed" in text


def test_openai_usage_reports_cache_only_with_enable_cache_report():
    # SGLang puts prompt_tokens_details in OpenAI usage only with --enable-cache-report.
    assert run_with_server(make_engine(), _completions_twice) is None
    assert run_with_server(make_engine(enable_cache_report=True), _completions_twice) == {"cached_tokens": 63}


async def _completions_twice(session, base):
    body = {"model": "dsv4-flash", "prompt": "x" * 256, "max_tokens": 2}
    usage = None
    for _ in range(2):
        async with session.post(f"{base}/v1/completions", json=body) as response:
            usage = (await response.json())["usage"]
    return usage.get("prompt_tokens_details")


def _bench(url, out, *extra):
    argv = [
        sys.executable, "-m", "sglnode", "bench", "--url", url, "--api", "generate",
        "--concurrency", "1,4", "--num-requests", "12", "--input-len", "64", "--output-len", "4",
        "--warmup", "4", "--workers", "2", "--json", str(out), "--no-progress", *extra,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(Path(out).read_text()), done.stdout


@pytest.mark.timeout(600)
def test_bench_sees_no_cache_hits_unless_the_shared_prefix_workload_is_chosen(tmp_path):
    with sim(FLASH_TP4) as server:
        url = server.base_url()
        distinct, table = _bench(url, tmp_path / "distinct.json")
        assert [s["prefix_cache"]["cached_tokens"] for s in distinct["stages"]] == [0, 0]
        assert all(s["prefix_cache"]["requests_reporting"] > 0 for s in distinct["stages"])
        assert "prefix cache" not in table
        shared, table = _bench(
            url, tmp_path / "shared.json", "--workload", "shared-prefix", "--prefix-len", "48"
        )
        assert all(s["prefix_cache"]["cached_tokens"] > 0 for s in shared["stages"])
        assert "from its prefix cache" in table and "shared-prefix workload asks for them" in table
