"""The channel that carries a job's events from a runner thread to the event loop (batching, wake-ups, the
first-text handoff, errors, cancellation), driven by a real thread against a real event loop; and the preamble
coalescing of the streams."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.engine.events import Done, FinishReason, TextDelta
from service.errors import GenerationTimeout
from service.runners.channel import Channel


def texts(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_a_held_first_text_keeps_the_runner_until_it_was_sent():
    async def main():
        channel = Channel(asyncio.get_running_loop())
        channel.handoff = 30.0  # long enough that only the second get() can release it
        returned = threading.Event()

        def runner():
            channel.put(TextDelta("first"), hold=True)
            returned.set()
            channel.put(TextDelta(" second"))
            channel.put(Done(FinishReason.LENGTH))

        thread = threading.Thread(target=runner)
        thread.start()
        assert texts(await channel.get()) == "first"
        await asyncio.sleep(0.05)  # the dialect renders and sends the first chunk
        assert not returned.is_set()
        rest = await channel.get()  # asking for more means the first chunk is out
        assert await asyncio.to_thread(returned.wait, 5)
        thread.join()
        rest += await channel.get()
        assert texts(rest) == " second" and isinstance(rest[-1], Done) and await channel.get() == []

    asyncio.run(main())


def test_text_put_while_the_loop_is_busy_wakes_nobody_and_comes_joined():
    async def main():
        loop = asyncio.get_running_loop()
        channel = Channel(loop)
        wakes = 0
        original = loop.call_soon_threadsafe

        def counting(callback, *args):
            nonlocal wakes
            wakes += callback == channel._ready.set
            return original(callback, *args)

        loop.call_soon_threadsafe = counting
        taken, put_all = threading.Event(), threading.Event()

        def runner():
            channel.put(TextDelta("a"))
            taken.wait(5)
            for i in range(50):
                channel.put(TextDelta(str(i % 10)))
            put_all.set()

        thread = threading.Thread(target=runner)
        thread.start()
        assert texts(await channel.get()) == "a"
        taken.set()
        woken_for_first = wakes
        await asyncio.to_thread(put_all.wait, 5)  # the loop is busy elsewhere: nobody waits on the channel
        assert wakes == woken_for_first
        assert await channel.get() == [TextDelta("0123456789" * 5)]  # one event, not fifty
        thread.join()

    asyncio.run(main())


def test_an_error_comes_after_the_events_before_it():
    async def main():
        channel = Channel(asyncio.get_running_loop())
        channel.put(TextDelta("partial"))
        channel.fail(GenerationTimeout("too slow"))
        assert texts(await channel.get()) == "partial"
        with pytest.raises(GenerationTimeout):
            await channel.get()
        assert channel.finished

    asyncio.run(main())


def test_wait_finished_returns_when_the_runner_lets_go():
    async def main():
        channel = Channel(asyncio.get_running_loop())
        waiter = asyncio.ensure_future(channel.wait_finished())
        await asyncio.sleep(0.02)
        assert not waiter.done()
        threading.Thread(target=lambda: channel.put(Done(FinishReason.CANCELLED))).start()
        await asyncio.wait_for(waiter, 5)

    asyncio.run(main())


def test_preambles_leave_with_the_next_item():
    from service.api.stream import Preamble, coalesced

    async def events(*items):
        for item in items:
            yield item

    async def collect(*items):
        return [x async for x in coalesced(events(*items))]

    assert asyncio.run(collect(Preamble("a"), Preamble("b"), "c", "d")) == ["abc", "d"]
    assert asyncio.run(collect(Preamble("a"))) == ["a"]  # nothing followed: still sent
