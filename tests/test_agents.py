"""Tools, thinking and structured output end to end: the official SDKs against a real server and generated
random-weight models, one per prompt-style format. Random weights say nothing useful, so the tests assert what
the grammar guarantees (schema-valid JSON, valid calls), the protocol, and the refusals."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from .conformance import assert_documented
from .fakes import FakeRunner, fake_app
from .server import TEST_CATALOG

WEATHER_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                  "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
                                 "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                           "parameters": WEATHER_SCHEMA}},
         {"type": "function", "function": {"name": "get_time", "description": "The time",
                                           "parameters": {"type": "object", "properties": {},
                                                          "additionalProperties": False}}}]
ANSWER_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["ok", "score"],
                 "properties": {"ok": {"type": "boolean"}, "score": {"type": "integer", "minimum": 0, "maximum": 99}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def ant(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def oll(server):
    return ollama.Client(host=server.url)


def _valid_call(name: str, arguments: dict | str):
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    jsonschema.validate(args, schema)
    return args


# ---- OpenAI -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["tiny-coder", "tiny-llama3", "tiny-mistral", "tiny-harmony", "tiny-pythonic",
                                   "tiny-qwen3"])
def test_openai_required_tool_choice_gives_a_valid_call_in_every_format(oai, model):
    r = oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                                    reasoning_effort="none" if model in ("tiny-qwen3", "tiny-harmony") else None)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in ("get_weather",
                                                                                               "get_time")
    _valid_call(call.function.name, call.function.arguments)
    assert not choice.message.content


@pytest.mark.parametrize("model", ["tiny-coder", "tiny-qwen3"])
def test_openai_streamed_named_call_arrives_as_deltas_without_markup(oai, model):
    stream = oai.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, stream=True, max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        reasoning_effort="none" if model == "tiny-qwen3" else None)
    calls, content, reasons = {}, "", []
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasons.append(chunk.choices[0].finish_reason)
        for d in delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            if d.id:
                assert entry["id"] is None and entry["arguments"] == ""  # id and name come first
                entry["id"], entry["name"] = d.id, d.function.name
            entry["arguments"] += d.function.arguments or ""
    assert list(calls) == [0] and calls[0]["name"] == "get_weather"
    assert _valid_call("get_weather", calls[0]["arguments"])["city"] in ("Paris", "Rome", "Oslo")
    assert "<" not in content and reasons[-1] == "tool_calls"


def test_openai_json_schema_is_enforced_streaming_and_not(oai):
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    r = oai.chat.completions.create(model="tiny-coder", messages=ASK, response_format=fmt, max_tokens=60)
    jsonschema.validate(json.loads(r.choices[0].message.content), ANSWER_SCHEMA)
    assert r.choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(
        model="tiny-coder", messages=ASK, response_format=fmt, max_tokens=60, stream=True))
    assert text == r.choices[0].message.content  # greedy: the same constrained answer


def test_openai_json_object_mode_gives_a_json_object(oai):
    r = oai.chat.completions.create(model="tiny-llama3", messages=ASK, max_tokens=200,
                                    response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_openai_round_trip_call_result_next_turn_reuses_the_prefix(oai):
    first = oai.chat.completions.create(model="tiny-coder", messages=ASK, tools=TOOLS, max_tokens=120,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"}]
    second = oai.chat.completions.create(model="tiny-coder", messages=history, tools=TOOLS, max_tokens=5)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 5  # the call and its result are in the prompt
    assert second.usage.prompt_tokens_details.cached_tokens > 0  # the agent's next step reuses the first's KV


def test_openai_refusals_are_400s_in_its_dialect(oai):
    with pytest.raises(openai.BadRequestError, match="does not support tools"):
        oai.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    with pytest.raises(openai.BadRequestError, match="does not support thinking"):
        oai.chat.completions.create(model="tiny", messages=ASK, reasoning_effort="high")
    with pytest.raises(openai.BadRequestError, match="not one of the tools"):
        oai.chat.completions.create(model="tiny-coder", messages=ASK, tools=TOOLS,
                                    tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError, match="cannot be enforced") as err:
        oai.chat.completions.create(model="tiny-coder", messages=ASK, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": "2"}}})
    assert err.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError, match="response_format"):
        oai.chat.completions.create(model="tiny-coder", messages=ASK, response_format={"type": "yaml"})


# ---- Anthropic ----------------------------------------------------------------------------------------------
def test_anthropic_forced_tool_use_streams_input_json_and_round_trips(ant, server):
    kwargs = dict(model="tiny-qwen3", max_tokens=120, tools=ANTHROPIC_TOOLS, messages=ASK,
                  tool_choice={"type": "tool", "name": "get_weather"}, thinking={"type": "disabled"})
    m = ant.messages.create(**kwargs)
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    _valid_call("get_weather", use.input)
    with ant.messages.stream(**kwargs) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "input_json_delta" in kinds and final.stop_reason == "tool_use"
    assert [b.input for b in final.content if b.type == "tool_use"] == [use.input]  # greedy, same call

    history = ASK + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "22 C"}]},
                         {"type": "text", "text": "And tomorrow?"}]}]
    again = ant.messages.create(model="tiny-qwen3", max_tokens=5, tools=ANTHROPIC_TOOLS, messages=history,
                                thinking={"type": "disabled"})
    assert again.usage.input_tokens > m.usage.input_tokens and again.usage.cache_read_input_tokens > 0
    failed = history[:-1] + [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use.id, "content": "no network", "is_error": True}]}]
    assert ant.messages.create(model="tiny-qwen3", max_tokens=3, messages=failed).stop_reason == "max_tokens"


def test_anthropic_any_tool_choice_and_system_turns_inside_messages(ant):
    m = ant.messages.create(model="tiny-coder", max_tokens=120, tools=ANTHROPIC_TOOLS, tool_choice={"type": "any"},
                            messages=[{"role": "system", "content": "You are terse."}] + ASK)
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and use.name in ("get_weather", "get_time")


def test_anthropic_thinking_blocks_within_the_budget(ant, server):
    """The DeepSeek-R1 template opens the reasoning; the budget closes it after `budget_tokens` tokens."""
    kwargs = dict(model="tiny-r1", max_tokens=40, messages=ASK, thinking={"type": "enabled", "budget_tokens": 6})
    m = ant.messages.create(**kwargs)
    assert m.content[0].type == "thinking" and m.content[0].signature
    tokenizer = server.manager.models["tiny-r1:s-f32"].runner.tokenizer
    assert 1 <= len(tokenizer.encode(m.content[0].thinking, add_special_tokens=False)) <= 7
    with ant.messages.stream(**kwargs) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "thinking_delta" in kinds and "signature_delta" in kinds
    assert final.content[0].thinking == m.content[0].thinking
    with pytest.raises(anthropic.BadRequestError, match="does not support thinking"):
        ant.messages.create(model="tiny", max_tokens=10, messages=ASK, thinking={"type": "enabled",
                                                                                 "budget_tokens": 5})


def test_anthropic_count_tokens_counts_tools_and_system(ant):
    plain = ant.messages.count_tokens(model="tiny-qwen3", messages=ASK).input_tokens
    tools = ant.messages.count_tokens(model="tiny-qwen3", messages=ASK, tools=ANTHROPIC_TOOLS).input_tokens
    system = ant.messages.count_tokens(model="tiny-qwen3", messages=ASK, system="Answer in French.").input_tokens
    assert tools > plain + 20 and system > plain


def test_a_volatile_billing_header_does_not_defeat_prefix_reuse(ant):
    def ask(nonce: str):
        head = f"x-anthropic-billing-header: cc_version=2.1; cch={nonce};\n"
        system = head + "You are a coding agent. " + "Be exact. " * 20
        return ant.messages.create(model="tiny", max_tokens=2, system=system, messages=ASK)

    ask("aaaa1111")
    assert ask("bbbb2222").usage.cache_read_input_tokens > 0


# ---- Ollama -------------------------------------------------------------------------------------------------
def test_ollama_format_schema_and_json_are_enforced(oll):
    r = oll.chat(model="tiny-llama3", messages=ASK, format=ANSWER_SCHEMA, options={"num_predict": 60})
    jsonschema.validate(json.loads(r.message.content), ANSWER_SCHEMA)
    parts = list(oll.chat(model="tiny-llama3", messages=ASK, format=ANSWER_SCHEMA, stream=True,
                          options={"num_predict": 60}))
    assert "".join(p.message.content for p in parts) == r.message.content and parts[-1].done_reason == "stop"
    g = oll.generate(model="tiny-llama3", prompt="Answer in JSON", format="json", options={"num_predict": 200})
    assert isinstance(json.loads(g.response), dict) and g.done_reason == "stop"


def test_ollama_think_and_tool_round_trip(oll):
    r = oll.chat(model="tiny-r1", messages=ASK, think=True, options={"num_predict": 12})
    assert r.message.thinking and "<think>" not in (r.message.content or "")
    history = ASK + [{"role": "assistant", "content": "",
                      "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}}]},
                     {"role": "tool", "content": "22 C", "tool_name": "get_weather"}]
    r = oll.chat(model="tiny-llama3", messages=history, tools=TOOLS, options={"num_predict": 3})
    assert r.done and r.prompt_eval_count > 20


def test_ollama_refusals_name_the_capability(server, oll):
    with pytest.raises(ollama.ResponseError, match='does not support thinking') as err:
        oll.chat(model="tiny", messages=ASK, think=True)
    assert err.value.status_code == 400
    with pytest.raises(ollama.ResponseError, match="does not support tools"):
        oll.chat(model="tiny", messages=ASK, tools=TOOLS)
    r = httpx.post(server.url + "/api/chat", json={"model": "tiny-r1", "messages": ASK, "think": "lots"})
    assert r.status_code == 400 and "invalid think value" in r.json()["error"]
    r = httpx.post(server.url + "/api/chat", json={"model": "tiny", "messages": ASK, "format": "yaml"})
    assert r.status_code == 400 and "invalid format" in r.json()["error"]


def test_capabilities_follow_the_catalog(server, oll):
    assert set(oll.show("tiny-qwen3").capabilities) == {"completion", "tools", "thinking"}
    assert oll.show("tiny").capabilities == ["completion"]
    models = {m["id"]: m for m in httpx.get(server.url + "/v1/models").json()["data"]}
    assert set(models["tiny-r1:s-f32"]["capabilities"]) == {"completion", "thinking"}


def test_thinking_turns_do_not_defeat_multi_turn_prefix_reuse(oll):
    first = oll.chat(model="tiny-r1", messages=ASK, options={"num_predict": 10})
    history = ASK + [{"role": "assistant", "content": first.message.content, "thinking": first.message.thinking},
                     {"role": "user", "content": "And in Rome?"}]
    second = httpx.post(f"{oll._client.base_url}/v1/chat/completions", json={
        "model": "tiny-r1", "messages": history, "max_tokens": 2}).json()
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


# ---- constrained and free jobs share a batch -----------------------------------------------------------------
def test_constrained_and_free_requests_in_one_batch_and_a_solo_job_moving_into_it(server):
    """A constrained job that starts alone and moves into the batch mid-answer (its grammar takes back the step
    it ran ahead) gives the answer it gives alone; constrained neighbours stay schema-valid."""
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER_SCHEMA}}
    digits = {"type": "object", "additionalProperties": False, "required": ["digits"], "properties": {"digits": {
        "type": "array", "minItems": 120, "maxItems": 120, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}
    long = {"type": "json_schema", "json_schema": {"name": "d", "schema": digits}}

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            async def ask(i: int, response_format, tokens: int = 40):
                body = {"model": "tiny-coder", "messages": [{"role": "user", "content": f"question {i}"}],
                        "max_tokens": tokens, **({"response_format": response_format} if response_format else {})}
                return (await client.post("/v1/chat/completions", json=body)).json()

            alone = await ask(0, long, 400)
            moved = server.manager.models["tiny-coder:s-f32"].runner.stats().get("solo_to_batch", 0)
            lead = asyncio.ensure_future(ask(0, long, 400))  # starts alone, then company arrives mid-answer
            await asyncio.sleep(0.1)
            rest = await asyncio.gather(*(ask(i, fmt if i % 2 == 0 else None, 30) for i in range(1, 7)))
            return alone, await lead, rest, moved

    alone, lead, rest, moved = asyncio.run(main())
    runner = server.manager.models["tiny-coder:s-f32"].runner
    assert runner.stats()["solo_to_batch"] > moved
    assert lead["choices"][0]["message"]["content"] == alone["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(lead["choices"][0]["message"]["content"]), digits)
    for i, r in enumerate(rest, start=1):
        if i % 2 == 0:
            jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), ANSWER_SCHEMA)
    assert runner.stats()["peak_running"] >= 2


# ---- every dialect renders reasoning and calls (a scripted runner) ------------------------------------------
def test_all_three_sdks_render_thinking_text_and_calls(tmp_path, monkeypatch):
    from service.engine.events import Done, FinishReason, TextDelta, ThinkingDelta, ToolCall, Usage

    script = [ThinkingDelta("Let me "), ThinkingDelta("look."), TextDelta("Checking."),
              ToolCall("call_1", "get_weather", '{"city": "Paris", "days": 2}'),
              ToolCall("call_2", "get_time", "{}"), Done(FinishReason.TOOL_CALLS, Usage(5, 9))]
    monkeypatch.setattr(FakeRunner, "script", script)
    with fake_app(tmp_path, [TEST_CATALOG]) as (client, _):
        oai = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=client, max_retries=0)
        r = oai.chat.completions.create(model="tiny-qwen3", messages=ASK, tools=TOOLS)
        msg = r.choices[0].message
        assert msg.content == "Checking." and msg.model_extra["reasoning_content"] == "Let me look."
        assert [(c.function.name, c.function.arguments) for c in msg.tool_calls] == [
            ("get_weather", '{"city": "Paris", "days": 2}'), ("get_time", "{}")]
        chunks = list(oai.chat.completions.create(model="tiny-qwen3", messages=ASK, tools=TOOLS, stream=True))
        indexes = [d.index for c in chunks for d in (c.choices[0].delta.tool_calls or []) if c.choices]
        assert sorted(set(indexes)) == [0, 1] and chunks[-1].choices[0].finish_reason == "tool_calls"
        assert "".join(c.choices[0].delta.model_extra.get("reasoning", "") for c in chunks) == "Let me look."

        ant = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=client, max_retries=0)
        with ant.messages.stream(model="tiny-qwen3", max_tokens=50, messages=ASK, tools=ANTHROPIC_TOOLS) as s:
            final = s.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
        assert final.content[0].thinking == "Let me look." and final.content[2].input == {"city": "Paris", "days": 2}
        assert final.stop_reason == "tool_use"
        assert ant.messages.create(model="tiny-qwen3", max_tokens=50, messages=ASK).content[0].type == "thinking"

        oll = ollama.Client(host="http://testserver")
        oll._client = client
        r = oll.chat(model="tiny-qwen3", messages=ASK, tools=TOOLS, stream=False)
        assert r.message.thinking == "Let me look." and r.message.content == "Checking."
        assert [(c.function.name, c.function.arguments) for c in r.message.tool_calls] == [
            ("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})]
        parts = list(oll.chat(model="tiny-qwen3", messages=ASK, tools=TOOLS, stream=True))
        assert [c.function.name for p in parts for c in p.message.tool_calls or []] == ["get_weather", "get_time"]
        lines = [json.loads(x) for x in client.post("/api/chat", json={"model": "tiny-qwen3", "messages": ASK,
                                                                         "tools": TOOLS}).text.splitlines()]
        assert [c["function"]["index"] for x in lines for c in x["message"].get("tool_calls", [])] == [0, 1]
        document = client.get("/openapi.json").text
        for path, body in [("/v1/chat/completions", {"model": "tiny-qwen3", "messages": ASK, "tools": TOOLS}),
                           ("/v1/chat/completions", {"model": "tiny-qwen3", "messages": ASK, "stream": True}),
                           ("/v1/messages", {"model": "tiny-qwen3", "max_tokens": 50, "messages": ASK}),
                           ("/v1/messages", {"model": "tiny-qwen3", "max_tokens": 50, "messages": ASK,
                                             "stream": True}),
                           ("/api/chat", {"model": "tiny-qwen3", "messages": ASK, "tools": TOOLS, "stream": False}),
                           ("/api/generate", {"model": "tiny-qwen3", "prompt": "hi", "stream": False})]:
            assert_documented(client.post(path, json=body), "post", path, document)  # thinking, calls included
