"""Tool-call formats, the streaming output splitter, grammars and the refusals, without a model.

Model output below is written from each family's documented format (the chat templates and model cards
named in catalog/prompt-styles.yaml)."""

from __future__ import annotations

import json

import pytest

from service.catalog import load_catalog
from service.engine.events import TextDelta, ThinkingDelta, ToolCall
from service.engine.grammar import Constraint, check
from service.engine.job import ModelTraits, build_job
from service.engine.output import OutputSpec
from service.engine.request import (
    GenerationRequest,
    Message,
    ResponseFormat,
    Thinking,
    Tool,
    ToolChoice,
)
from service.engine.toolformats import tool_format
from service.errors import BadRequest

WEATHER = Tool("get_weather", "Weather for a city", {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]})
TIME = Tool("get_time", "", {"type": "object", "properties": {}})


def _calls(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("fmt, body, expected", [
    ("json_tags", '\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n',
     [("get_weather", {"city": "Paris", "days": 2})]),
    ("json_tags", '{"name":"get_time","arguments":"{}"}', [("get_time", {})]),
    ("xml_function", "\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n"
                     "</parameter>\n</function>\n", [("get_weather", {"city": "New York", "days": 3})]),
    ("xml_function", "<function=get_weather>\n<parameter=city>\n42\n</parameter>\n</function>",
     [("get_weather", {"city": "42"})]),  # a string parameter stays a string
    ("json", '{"name": "get_weather", "parameters": {"city": "Oslo"}}', [("get_weather", {"city": "Oslo"})]),
    ("json", '<|python_tag|>{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": '
             '{"city": "Rome"}}', [("get_time", {}), ("get_weather", {"city": "Rome"})]),
    ("mistral", ' [{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "abc123def"}]',
     [("get_weather", {"city": "Lyon"})]),
    ("mistral", 'get_weather[ARGS]{"city": "Nice"}', [("get_weather", {"city": "Nice"})]),
    ("pythonic", '[get_weather(city="Paris", days=2), get_time()]',
     [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})]),
    ("pythonic", '[get_weather(city="Bern", metric=true)]', [("get_weather", {"city": "Bern", "metric": True})]),
    ("harmony", 'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Tokyo"}',
     [("get_weather", {"city": "Tokyo"})]),
])
def test_each_format_parses_its_documented_calls(fmt, body, expected):
    assert _calls(tool_format(fmt).parse(body, [WEATHER, TIME])) == expected


@pytest.mark.parametrize("fmt, body", [("json_tags", "{not json"), ("json_tags", '{"arguments": {}}'),
                                       ("pythonic", "[os.system('x')]"), ("pythonic", "[f(*a)]"),
                                       ("mistral", "hello"), ("harmony", "final<|message|>hi")])
def test_what_is_not_a_call_is_not_parsed_as_one(fmt, body):
    assert tool_format(fmt).parse(body, [WEATHER]) is None


def _split(spec: OutputSpec, text: str, prompt: str = "", step: int = 1):
    """Feed `text` a few characters at a time, as a model streams it; returns the merged pieces."""
    splitter = spec.splitter(prompt)
    pieces = []
    for i in range(0, len(text), step):
        pieces += splitter.feed(text[i:i + step])
    pieces += splitter.finish()
    merged = []
    for p in pieces:
        if merged and type(p) is type(merged[-1]) and not isinstance(p, ToolCall):
            merged[-1] = type(p)(merged[-1].text + p.text)
        else:
            merged.append(p)
    return merged, splitter.called


QWEN = OutputSpec("<think>", "</think>", tool_format=tool_format("json_tags"), tools=(WEATHER,))


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_streamed_reasoning_and_calls_never_leak_markup(step):
    text = ('<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Rome"}}\n</tool_call>')
    pieces, called = _split(QWEN, text, step=step)
    assert pieces[0] == ThinkingDelta("\nThe user wants weather.\n")
    assert pieces[1] == TextDelta("Let me check.\n")
    assert _calls(pieces[2:]) == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert called and not any("<" in p.text for p in pieces if isinstance(p, TextDelta))


def test_a_template_that_opens_the_reasoning_starts_the_output_inside_it():
    pieces, _ = _split(QWEN, "hmm\n</think>\n\nAnswer.", prompt="<|im_start|>assistant\n<think>\n")
    assert pieces == [ThinkingDelta("hmm\n"), TextDelta("Answer.")]


def test_reasoning_is_dropped_when_the_request_turned_it_off():
    spec = OutputSpec("<think>", "</think>", keep_thinking=False)
    assert _split(spec, "<think>x</think>Hi")[0] == [TextDelta("Hi")]


def test_a_call_that_does_not_parse_is_sent_as_text_and_an_unfinished_one_too():
    pieces, called = _split(QWEN, "<tool_call>\n{broken\n</tool_call>")
    assert pieces == [TextDelta("<tool_call>\n{broken\n</tool_call>")] and not called
    assert _split(QWEN, '<tool_call>\n{"name": "get_wea')[0] == [TextDelta('<tool_call>\n{"name": "get_wea')]


def test_parallel_calls_off_keeps_the_first_call_only():
    spec = OutputSpec(tool_format=tool_format("json_tags"), tools=(WEATHER,), parallel_tool_calls=False)
    one = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    pieces, _ = _split(spec, one + one)
    assert len(pieces) == 1 and isinstance(pieces[0], ToolCall)


@pytest.mark.parametrize("step", [1, 5])
def test_untagged_formats_wait_for_the_whole_reply(step):
    llama = OutputSpec(tool_format=tool_format("json"), tools=(WEATHER,))
    pieces, called = _split(llama, ' {"name": "get_weather", "parameters": {"city": "Oslo"}}', step=step)
    assert _calls(pieces) == [("get_weather", {"city": "Oslo"})] and called
    assert _split(llama, "{curly} text", step=step)[0] == [TextDelta("{curly} text")]
    assert _split(llama, "Plain answer.", step=step)[0] == [TextDelta("Plain answer.")]


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_harmony_channels(step):
    spec = OutputSpec("<|channel|>analysis<|message|>", "<|end|>", tool_format=tool_format("harmony"),
                      tools=(WEATHER,))
    text = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather <|constrain|>json<|message|>{"city": "Tokyo"}')
    pieces, called = _split(spec, text, step=step)
    assert pieces[0] == ThinkingDelta("Need weather.")
    assert _calls(pieces[1:]) == [("get_weather", {"city": "Tokyo"})] and called
    final = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi there"
    assert _split(spec, final, step=step)[0] == [ThinkingDelta("Easy."), TextDelta("Hi there")]


# ---- templates ----------------------------------------------------------------------------------------------
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "content": "22 C and sunny", "tool_call_id": "call_1", "name": "get_weather"},
]
TOOLS = [{"type": "function", "function": {"name": WEATHER.name, "description": WEATHER.description,
                                           "parameters": WEATHER.parameters}}]


def _render(template: str, **kwargs) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[CONVERSATION], chat_template=template, tools=TOOLS,
                                        add_generation_prompt=True, bos_token="<s>", eos_token="</s>", **kwargs)
    return rendered[0]


@pytest.fixture(scope="module")
def styles():
    return load_catalog().raise_for_problems().prompt_styles


def test_every_chat_style_has_a_fallback_template_that_renders_a_tool_conversation(styles):
    chat = [s for s in styles.values() if s.chat_template]  # embedding and speech models have no chat
    assert len(chat) >= 13
    for style in chat:
        text = _render(style.chat_template)
        assert "Be brief." in text and "Weather in Paris?" in text and "22 C and sunny" in text, style.name
        assert "Paris" in text.split("Weather in Paris?")[1], f"{style.name} drops the assistant's tool call"
        if style.tool_calls:
            assert "get_weather" in text.split("Weather in Paris?")[0], f"{style.name} drops the tool definitions"


def test_each_tool_style_renders_calls_its_own_parser_reads_back(styles):
    """What a template writes for a past call is what the style's parser reads: the formats agree."""
    for style in (s for s in styles.values() if s.tool_calls):
        fmt = tool_format(style.tool_calls.format, style.tool_calls.start, style.tool_calls.end)
        text = _render(style.chat_template).split("Weather in Paris?")[1]
        if fmt.name == "harmony":
            body = next(s for s in text.split("<|channel|>") if "to=functions" in s).split("<|call|>")[0]
        elif fmt.start:
            body = text.split(fmt.start, 1)[1]
            body = body.split(fmt.end)[0] if fmt.end else body.split("</s>")[0]
        else:  # the call is the whole assistant turn
            body = text.split("<|end_header_id|>\n\n")[1].split("<|eot_id|>")[0]
        assert _calls(fmt.parse(body, [WEATHER])) == [("get_weather", {"city": "Paris", "days": 2})], style.name


def test_thinking_styles_switch_off_and_keep_recent_reasoning(styles):
    qwen3 = styles["qwen3"].chat_template
    assert _render(qwen3, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert _render(qwen3).endswith("<|im_start|>assistant\n")
    assert "<think>\nCall the tool.\n</think>" in _render(qwen3)  # reasoning of the turn in progress
    assert _render(styles["deepseek-r1"].chat_template).endswith("<｜Assistant｜><think>\n")
    assert "Reasoning: high" in _render(styles["harmony"].chat_template, reasoning_effort="high")


# ---- requests the model cannot serve are refused ------------------------------------------------------------
def _traits(styles, style: str, abilities=("chat", "generate", "tools", "thinking")):
    from service.catalog.model import Context, Family

    family = Family(name="m", description="", license="", model_card="", kind="text", loader="mlx-lm",
                    abilities=tuple(abilities), prompt_style=style, context=Context(1024), default_size="s",
                    models=())
    return ModelTraits.of("m", family, styles[style])


def _job(traits, **what):
    req = GenerationRequest(model="m", messages=[Message("user", "hi")], **what)
    return build_job(req, traits, max_tokens=100, timeout=10)


@pytest.mark.parametrize("what, message", [
    ({"tools": [WEATHER]}, '"m" does not support tools'),
    ({"thinking": Thinking(enabled=True)}, '"m" does not support thinking'),
])
def test_asking_for_what_the_model_cannot_do_is_a_400(styles, what, message):
    plain = _traits(styles, "chatml", ("chat", "generate"))
    with pytest.raises(BadRequest, match=message):
        _job(plain, **what)
    _job(plain, thinking=Thinking(enabled=False))  # turning off what it does not have is fine


@pytest.mark.parametrize("what, message", [
    ({"tools": [WEATHER], "tool_choice": ToolChoice("named", "nope")}, "not one of the tools"),
    ({"tool_choice": ToolChoice("required")}, "needs tools"),
    ({"response_format": ResponseFormat({"type": "strin"}), "ignore_eos": False}, "Invalid type: strin"),
    ({"response_format": ResponseFormat({}), "ignore_eos": True}, "ignore_eos"),
])
def test_bad_tool_and_format_requests_are_400s_that_say_why(styles, what, message):
    with pytest.raises(BadRequest, match=message):
        _job(_traits(styles, "qwen3"), **what)


def test_tool_choice_none_offers_no_tools_and_looks_for_no_calls(styles):
    job = _job(_traits(styles, "qwen3"), tools=[WEATHER], tool_choice=ToolChoice("none"))
    assert job.chat.tools is None and job.output.tool_format is None and job.constraint is None


def test_forced_choices_become_grammars_of_the_styles_call_format(styles):
    job = _job(_traits(styles, "qwen3"), tools=[WEATHER, TIME], tool_choice=ToolChoice("named", "get_time"))
    assert job.constraint.forced and [t.name for t in job.constraint.calls] == ["get_time"]
    lark = job.constraint.lark(json.dumps)
    assert '"<tool_call>"' in lark and '"get_time"' in lark and "get_weather" not in lark
    check(Constraint(schema={}, calls=(WEATHER,), tool_format=tool_format("xml_function")))  # compiles
