"""The pipe that carries text from the MLX thread to the event loop (batching, wake-ups, the first-piece
handoff), driven by a real thread against a real event loop; and the preamble coalescing of the streams."""

from __future__ import annotations

import asyncio
import threading

from service.api.stream import _Pipe


def test_first_piece_holds_the_mlx_thread_until_it_was_sent():
    async def main():
        pipe = _Pipe(asyncio.get_running_loop())
        pipe.handoff = 30.0  # long enough that only the second get() can release it
        returned = threading.Event()

        def mlx():
            pipe.put("first")
            returned.set()
            pipe.put(" second")

        thread = threading.Thread(target=mlx)
        thread.start()
        assert await pipe.get() == "first"
        await asyncio.sleep(0.05)  # the dialect renders and sends the first chunk
        assert not returned.is_set()
        second = await pipe.get()  # asking for more means the first chunk is out
        assert await asyncio.to_thread(returned.wait, 5)
        thread.join()
        pipe.close()
        rest = await pipe.get()
        assert second + (rest or "") == " second" and await pipe.get() is None

    asyncio.run(main())


def test_text_put_while_the_loop_is_busy_wakes_nobody_and_comes_as_one_chunk():
    async def main():
        loop = asyncio.get_running_loop()
        pipe = _Pipe(loop)
        pipe.handoff = 0
        wakes = 0
        original = loop.call_soon_threadsafe

        def counting(callback, *args):
            nonlocal wakes
            wakes += callback == pipe._ready.set
            return original(callback, *args)

        loop.call_soon_threadsafe = counting
        taken, put_all = threading.Event(), threading.Event()

        def mlx():
            pipe.put("a")
            taken.wait(5)
            for i in range(50):
                pipe.put(str(i % 10))
            put_all.set()

        thread = threading.Thread(target=mlx)
        thread.start()
        assert await pipe.get() == "a"
        taken.set()
        woken_for_first = wakes
        await asyncio.to_thread(put_all.wait, 5)  # the loop is busy elsewhere: nobody waits on the pipe
        assert wakes == woken_for_first
        assert await pipe.get() == "0123456789" * 5
        thread.join()
        pipe.close()
        assert await pipe.get() is None

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
