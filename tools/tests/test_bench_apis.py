import json

import pytest

from sglnode.bench.apis import API_MARKERS, BodyOptions, build_body
from sglnode.bench.prompts import TOKEN_ID_HIGH, TOKEN_ID_LOW, make_prompts


def test_generate_body_uses_input_ids_and_sglang_sampling_params():
    body = json.loads(build_body("generate", [5, 6], "x", 32, BodyOptions("m", True, True)))
    assert body == {
        "input_ids": [5, 6],
        "sampling_params": {"max_new_tokens": 32, "ignore_eos": True, "temperature": 0.0},
        "stream": True,
    }


@pytest.mark.parametrize(("api", "prompt_key"), [("completions", "prompt"), ("chat", "messages")])
def test_openai_bodies_ask_for_usage_in_the_stream(api, prompt_key):
    body = json.loads(build_body(api, [5], "hi", 8, BodyOptions("m", False, False)))
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert body["max_tokens"] == 8 and body["ignore_eos"] is False and prompt_key in body


@pytest.mark.parametrize("text", ['{"text":"a b"}', '{"text": "a b"}'])
def test_markers_match_compact_and_spaced_json_but_not_generated_text(text):
    markers = API_MARKERS["completions"]
    assert sum(text.encode().count(m) for m in markers.content) == 1
    tricky = json.dumps({"text": 'he said "text":"x"'}).encode()
    assert sum(tricky.count(m) for m in markers.content) == 1


def test_prompts_are_seeded_and_of_the_requested_length():
    first, again = make_prompts(3, 50, seed=7), make_prompts(3, 50, seed=7)
    assert [p.ids for p in first] == [p.ids for p in again]
    assert all(len(p.ids) == 50 and len(p.text.split()) == 50 for p in first)
    assert all(TOKEN_ID_LOW <= i < TOKEN_ID_HIGH for p in first for i in p.ids)
    assert make_prompts(1, 50, seed=8)[0].ids != first[0].ids
