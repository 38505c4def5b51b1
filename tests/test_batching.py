"""Continuous batching in the mlx-lm runner, through a real server and the tiny generated models: requests join
a running batch and leave it on their own terms, a cancelled one leaves the others alone, the queue is counted
beyond the batch, and two models do not wait for each other."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager

import httpx
import pytest

from .conftest import pick_stop
from .server import Server

LONG = 100000


def chat(srv: Server, content: str, model: str = "tiny", **kw) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "temperature": 0, **kw}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)


@contextmanager
def anchor(srv: Server, model: str = "tiny"):
    """A stream that decodes until it is closed, so the requests sent meanwhile join a running batch."""
    body = {"model": model, "messages": [{"role": "user", "content": "go on forever"}], "stream": True,
            "ignore_eos": True}  # no max_tokens: as many as its context has room for
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()  # keep the iterator: dropping it closes the stream (a disconnect)
        next(lines)
        yield lines


def next_data(lines) -> str:
    """The next SSE data line (events are separated by blank lines)."""
    return next(line for line in lines if line)


def in_parallel(*calls):
    results = [None] * len(calls)

    def run(i, call):
        results[i] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.fixture(scope="module")
def srv(models_dir):
    with Server(models_dir, max_tokens=LONG, enable_prefix_cache=False) as s:
        yield s


def _runner(srv: Server, name: str = "tiny:s-f32"):
    return srv.manager.models[name].runner


def test_requests_joining_a_batch_get_what_they_would_get_alone(srv):
    prompts = [f"question {i}: " + "what does the cat read? " * (1 + i % 3) for i in range(6)]
    alone = [chat(srv, p, max_tokens=6 + i).json() for i, p in enumerate(prompts)]
    texts = [a["choices"][0]["message"]["content"] for a in alone]
    stops = [pick_stop(t) if i % 2 else None for i, t in enumerate(texts)]  # every other one has a stop string
    with anchor(srv):
        batched = in_parallel(*(lambda i=i: chat(srv, prompts[i], max_tokens=6 + i, stop=stops[i]).json()
                                for i in range(6)))
    assert _runner(srv).stats()["peak_running"] >= 2
    for i, (one, many) in enumerate(zip(alone, batched)):
        text = many["choices"][0]["message"]["content"]
        if stops[i] is None:
            assert text == texts[i] and many["usage"]["completion_tokens"] == 6 + i  # its own max_tokens
            assert many["choices"][0]["finish_reason"] == one["choices"][0]["finish_reason"]
        else:
            assert text == texts[i][: texts[i].index(stops[i])] and many["choices"][0]["finish_reason"] == "stop"
        assert many["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]


def test_cancelling_one_stream_leaves_the_others_running(srv):
    stats = _runner(srv).stats
    assert srv.wait(lambda: stats()["running"] == 0, timeout=30)  # earlier tests' streams have left
    cancelled = stats().get("cancelled", 0)
    with anchor(srv) as kept:
        with anchor(srv) as dropped:
            next_data(dropped)
        assert srv.wait(lambda: stats().get("cancelled", 0) == cancelled + 1 and stats()["running"] == 1,
                        timeout=30)
        r = chat(srv, "a short one", max_tokens=12, ignore_eos=True)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 12
        for _ in range(3):
            assert next_data(kept).startswith("data: ")  # the first stream still decodes
    assert srv.wait(lambda: stats()["running"] == 0, timeout=30)


def test_seeded_sampling_in_a_batch_is_what_it_is_alone(srv):
    kw = dict(max_tokens=12, temperature=1.0, seed=42)
    alone = chat(srv, "tell me", **kw).json()["choices"][0]["message"]["content"]
    with anchor(srv):
        a, b = in_parallel(lambda: chat(srv, "tell me", **kw), lambda: chat(srv, "tell me", **kw))
    assert a.json()["choices"][0]["message"]["content"] == b.json()["choices"][0]["message"]["content"] == alone


def test_the_queue_is_counted_beyond_a_full_batch(models_dir):
    with Server(models_dir, max_tokens=LONG, context_length=32768, batch_size=2, max_queue=1) as srv:
        with anchor(srv), anchor(srv) as second:
            served = srv.manager.models["tiny:s-f32"]
            waiting = threading.Thread(target=lambda: results.append(chat(srv, "waiting", max_tokens=3)))
            results: list = []
            waiting.start()
            assert srv.wait(lambda: served.waiting == 1)
            refused = chat(srv, "one too many", max_tokens=3)
            assert refused.status_code == 503 and "behind a full batch of 2" in refused.json()["error"]["message"]
            assert served.runner.stats()["running"] == 2 and not results
            second.close()  # a place in the batch frees up: the waiting request runs
            waiting.join(30)
            assert results[0].status_code == 200 and results[0].json()["usage"]["completion_tokens"] == 3


def test_a_second_model_is_loaded_and_served_while_the_first_generates(srv):
    with anchor(srv, "tiny:s-f32") as first:
        r = chat(srv, "quick", model="tiny:s-f32b", max_tokens=8, ignore_eos=True)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        assert _runner(srv).stats()["running"] == 1  # the first model's stream is still going
        assert next_data(first).startswith("data: ")


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 7}])
def test_a_job_decoding_alone_moves_into_the_batch_unchanged(srv, sampling):
    """Alone, a job decodes on mlx-lm's generate_step; when company arrives it continues in the batch."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "a long tale"}], "max_tokens": 300,
            "ignore_eos": True, "stream": True, **sampling}
    alone = chat(srv, "a long tale", max_tokens=300, ignore_eos=True, **sampling).json()
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        head = [next_data(lines) for _ in range(2)]  # it is decoding, alone
        with anchor(srv):  # company: both now run in the batch
            rest = list(lines)
    assert _runner(srv).stats()["peak_running"] >= 2
    chunks = [line[6:] for line in head + rest if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in map(json.loads, chunks) if c["choices"])
    assert text == alone["choices"][0]["message"]["content"]


def _job(prompt: str, tokens: int):
    from service.engine.job import ModelTraits, build_job
    from service.engine.request import GenerationRequest, Sampling

    req = GenerationRequest(model="t", prompt=prompt, max_tokens=tokens, ignore_eos=True,
                            sampling=Sampling(temperature=0))
    return build_job(req, ModelTraits("t"), max_tokens=1000, timeout=60)


async def _text(runner, job) -> str:
    from service.engine.events import TextDelta

    return "".join([e.text async for e in runner.submit(job) if isinstance(e, TextDelta)])


def _with_runner(srv: Server, test, **spec):
    """Run `test(runner)` on a runner of its own over the tiny model (built by the earlier tests)."""
    import asyncio

    from service.runners import LoadSpec
    from service.runners.mlx_lm import open_runner

    async def main():
        runner = await open_runner(LoadSpec(name="t", path=srv.manager.resolve("tiny").path, **spec))
        try:
            await test(runner)
        finally:
            await runner.close()

    asyncio.run(main())


def test_a_long_prompt_prefilled_alone_moves_into_the_batch_unchanged(srv):
    """Company arriving during a solo prefill (chunks of 8 tokens here): the batch prefills the rest."""
    import asyncio

    async def test(runner):
        story = "the cat and the library and the book " * 25
        alone = await _text(runner, _job(story, 20))
        first = asyncio.ensure_future(_text(runner, _job(story, 20)))
        while runner.stats()["running"] == 0:
            await asyncio.sleep(0)
        joined, _ = await asyncio.gather(first, _text(runner, _job("short one", 5)))
        assert joined == alone and runner.stats()["peak_running"] == 2

    _with_runner(srv, test, batch_size=4, prefill_step_size=8)


def test_a_failing_step_fails_its_jobs_and_the_runner_goes_on(srv):
    """A logits processor that raises (structured output plugs in there) fails the jobs of that step with a
    500, alone or in a batch; the model stays loaded and serves the next request."""
    import asyncio

    from service.errors import ServiceError

    def boom(_tokens, _logits):
        raise RuntimeError("the grammar broke")

    async def test(runner):
        plain = runner._processors
        runner._processors = lambda job, text: [boom] if job.prompt == "boom" else plain(job, text)
        expected = await _text(runner, _job("hello", 6))
        with pytest.raises(ServiceError, match="the grammar broke") as err:
            await _text(runner, _job("boom", 6))  # alone
        assert err.value.status == 500
        outcomes = await asyncio.gather(_text(runner, _job("a long one " * 3, 400)),
                                        _text(runner, _job("boom", 6)), return_exceptions=True)
        assert any(isinstance(o, ServiceError) for o in outcomes)  # in a batch
        assert await _text(runner, _job("hello", 6)) == expected
        assert runner.stats()["running"] == 0

    _with_runner(srv, test, batch_size=4)


def test_an_idle_runner_gathers_a_burst_for_at_most_a_share_of_its_ttft():
    """A burst arriving at an idle runner is prefilled together; a lone request waits at most 5% of the
    recent time to first token (and never more than 5 ms)."""
    import time
    from collections import deque
    from types import SimpleNamespace

    from service.runners.mlx_lm import MlxLmRunner

    for ttft, expect_all in ((1.0, True), (0.0, False)):
        state = SimpleNamespace(_lock=threading.Condition(), _inbox=deque([1]), _ttft=ttft)

        def arrive():  # the rest of the burst, as soon as the gathering runner lets go of the lock
            with state._lock:
                state._inbox.extend([2, 3, 4])
                state._lock.notify()

        burst = threading.Thread(target=arrive)
        with state._lock:
            burst.start()
            time.sleep(0.01)  # the burst's thread is now waiting for the lock
            start = time.monotonic()
            MlxLmRunner._gather(state)
            took, seen = time.monotonic() - start, len(state._inbox)
        burst.join()
        assert took < 0.05 and (seen == 4 if expect_all else seen == 1)
