import json

import pytest

from sglnode.bench.apis import API_INSPECTORS, BadEvent, BodyOptions, build_body
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


@pytest.mark.parametrize(
    ("api", "event", "expected"),
    [
        (
            "generate",
            {"text": "a", "meta_info": {"completion_tokens": 1, "prompt_tokens": 4}},
            (True, 1, 4, None),
        ),
        ("generate", {"text": "", "meta_info": {}}, (False, None, None, None)),
        (
            "generate",
            {"text": "a", "meta_info": {"finish_reason": {"type": "abort"}}},
            (True, None, None, "server_aborted"),
        ),
        (
            "completions",
            {"choices": [{"text": 'he said "text":"x"'}], "usage": None},
            (True, None, None, None),
        ),
        (
            "completions",
            {"choices": [], "usage": {"completion_tokens": 9, "prompt_tokens": 2}},
            (False, 9, 2, None),
        ),
        ("chat", {"choices": [{"delta": {"role": "assistant", "content": ""}}]}, (False, None, None, None)),
        (
            "chat",
            {"choices": [{"delta": {"reasoning_content": "hm"}, "finish_reason": None}]},
            (True, None, None, None),
        ),
    ],
)
def test_events_of_each_api_say_what_they_carry(api, event, expected):
    assert API_INSPECTORS[api](event) == expected


@pytest.mark.parametrize(
    ("api", "event"),
    [
        ("generate", ["text"]),
        ("generate", {"text": "a"}),  # no meta_info
        ("generate", {"text": "a", "meta_info": {"completion_tokens": "9"}}),
        ("generate", {"text": "a", "meta_info": {"completion_tokens": True}}),
        ("generate", {"text": "a", "meta_info": {"completion_tokens": -1}}),
        ("completions", {"text": "a", "completion_tokens": 999999}),  # no choices
        ("completions", {"choices": [{"delta": {"content": "a"}}]}),  # a chat chunk on completions
        ("chat", {"choices": [{"text": "a"}]}),  # a completions chunk on chat
        ("chat", {"choices": [{"delta": {"content": 5}}]}),
        ("completions", {"choices": [], "usage": [1]}),
    ],
)
def test_an_event_of_the_wrong_shape_is_refused(api, event):
    with pytest.raises(BadEvent):
        API_INSPECTORS[api](event)


def test_error_events_in_sglang_spelling_are_errors():
    info = API_INSPECTORS["chat"]({"error": {"object": "error", "message": "boom", "code": 400}})
    assert info[3].startswith("error_event: ") and "boom" in info[3]
    assert API_INSPECTORS["generate"]({"error": None, "text": "a", "meta_info": {}})[3] is None


def test_prompts_are_seeded_and_of_the_requested_length():
    first, again = make_prompts(3, 50, seed=7), make_prompts(3, 50, seed=7)
    assert [p.ids for p in first] == [p.ids for p in again]
    assert all(len(p.ids) == 50 and len(p.text.split()) == 50 for p in first)
    assert all(TOKEN_ID_LOW <= i < TOKEN_ID_HIGH for p in first for i in p.ids)
    assert make_prompts(1, 50, seed=8)[0].ids != first[0].ids
