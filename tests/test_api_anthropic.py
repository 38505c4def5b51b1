"""The Anthropic dialect through the official `anthropic` client against a real server."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from .conftest import pick_stop

MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def test_message_non_streaming(client):
    m = client.messages.create(model="tiny", max_tokens=10, messages=MSG)
    assert m.type == "message" and m.role == "assistant" and m.model == "tiny:s-f32"
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 10
    assert m.content[0].type == "text"


def test_streaming_event_sequence_and_text(client):
    full = client.messages.create(model="tiny", max_tokens=15, messages=MSG)
    with client.messages.stream(model="tiny", max_tokens=15, messages=MSG) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == full.content[0].text == final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 15
    assert final.usage.input_tokens == full.usage.input_tokens


def test_raw_event_names(server):
    body = {"model": "tiny", "max_tokens": 3, "messages": MSG, "stream": True}
    with httpx.stream("POST", server.url + "/v1/messages", json=body,
                      headers={"anthropic-version": "2023-06-01"}) as r:
        events = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert events[:2] == ["message_start", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[2:-3]) == {"content_block_delta"}


def test_stop_sequences_and_system_blocks(client):
    full = client.messages.create(model="tiny", max_tokens=30, messages=MSG,
                                  system=[{"type": "text", "text": "be brief"}])
    text = full.content[0].text
    stop = pick_stop(text)
    m = client.messages.create(model="tiny", max_tokens=30, messages=MSG,
                               system=[{"type": "text", "text": "be brief"}], stop_sequences=[stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == text[: text.index(stop)]


def test_count_tokens_matches_usage(client):
    m = client.messages.create(model="tiny", max_tokens=2, messages=MSG, system="sys")
    counted = client.messages.count_tokens(model="tiny", messages=MSG, system="sys")
    assert counted.input_tokens == m.usage.input_tokens


def test_models_in_anthropic_shape(client):
    page = client.models.list()
    assert any(m.id == "tiny:s-f32" and m.type == "model" for m in page.data)


def test_errors_in_anthropic_dialect(client, server):
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="nope-model", max_tokens=2, messages=MSG)
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="tiny", max_tokens=2, messages=[{"role": "robot", "content": "x"}])
    r = httpx.post(server.url + "/v1/messages", json={"model": "tiny", "messages": MSG},
                   headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/messages", content=b"{oops", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400 and r.json()["type"] == "error"
