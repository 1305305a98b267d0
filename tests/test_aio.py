"""asyncio: aget, atransaction, async iteration, aput; wake-ups and cancellation safety."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from conftest import Boom
from journaled import Empty, JournaledQueue, QueueClosed, QueueConfig
from journaled.aio import AsyncWaiter


async def until_waiting(reader, n: int = 1) -> None:
    """Yield to the loop until ``n`` waiters are queued on ``reader`` (bounded)."""
    for _ in range(10_000):
        if len(reader.core.waiters) >= n:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the waiter never registered")


@pytest.mark.asyncio
async def test_aget_returns_a_ready_item_at_once(jq):
    r = jq.reader("r")
    jq.put(b"a")
    item = await r.aget()
    assert item.data == b"a"
    assert not r.core.waiters


@pytest.mark.asyncio
async def test_aget_is_woken_by_a_put_from_another_thread(jq):
    r = jq.reader("r")
    task = asyncio.create_task(r.aget(timeout=60))
    await until_waiting(r)
    assert isinstance(r.core.waiters[0], AsyncWaiter)  # parked on a future, not polling
    threading.Thread(target=jq.put, args=(b"from-thread",)).start()
    item = await task
    assert item.data == b"from-thread"


@pytest.mark.asyncio
async def test_aget_timeout_raises_empty_and_leaves_the_line(jq):
    r = jq.reader("r")
    with pytest.raises(Empty):
        await r.aget(timeout=0.01)
    with pytest.raises(Empty):
        await r.aget(timeout=0)
    with pytest.raises(ValueError):
        await r.aget(timeout=-1)
    assert not r.core.waiters
    jq.put(b"later")
    assert r.get(block=False).data == b"later"  # nothing stranded on a dead waiter


@pytest.mark.asyncio
async def test_cancelled_aget_before_hand_off_leaves_no_waiter(jq):
    r = jq.reader("r")
    task = asyncio.create_task(r.aget())
    await until_waiting(r)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not r.core.waiters
    jq.put(b"x")
    assert r.get(block=False).data == b"x"


@pytest.mark.asyncio
async def test_item_handed_to_a_cancelled_aget_goes_back_to_the_head_uncounted(jq):
    r = jq.reader("r")
    task = asyncio.create_task(r.aget())
    await until_waiting(r)
    jq.put_many([b"first", b"second"])  # hand-off happens now, under the lock, on this thread
    assert r.core.waiters == type(r.core.waiters)() and len(r.core.open) == 1
    task.cancel()  # ...but the task is cancelled before it could resume
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(r.core.open) == 0
    again = r.get(block=False)
    assert (again.data, again.error_count) == (b"first", 0)
    assert r.stats().aborted == 0


@pytest.mark.asyncio
async def test_waiters_are_served_fifo_and_each_item_once(jq):
    r = jq.reader("r")
    tasks = [asyncio.create_task(r.aget(timeout=60)) for _ in range(5)]
    await until_waiting(r, 5)
    jq.put_many([b"%d" % i for i in range(5)])
    got = [(await t).data for t in tasks]
    assert got == [b"0", b"1", b"2", b"3", b"4"]


@pytest.mark.asyncio
async def test_threads_and_coroutines_share_the_line(jq):
    r = jq.reader("r")
    n = 200
    got: list[bytes] = []
    lock = threading.Lock()

    def thread_consumer() -> None:
        while True:
            try:
                item = r.get(timeout=30)
            except QueueClosed:
                return
            r.commit(item)
            if item.data == b"stop":
                return
            with lock:
                got.append(item.data)

    async def async_consumer() -> None:
        async for item in r:
            if item.data == b"stop":
                r.commit(item)
                return
            got.append(item.data)

    threads = [threading.Thread(target=thread_consumer) for _ in range(2)]
    for t in threads:
        t.start()
    consumers = [asyncio.create_task(async_consumer()) for _ in range(2)]
    payloads = [b"%d" % i for i in range(n)] + [b"stop"] * 4
    producer = threading.Thread(target=lambda: [jq.put(x) for x in payloads])
    producer.start()
    await asyncio.gather(*consumers)
    await asyncio.get_running_loop().run_in_executor(None, producer.join)
    for t in threads:
        await asyncio.get_running_loop().run_in_executor(None, t.join, 30)
    assert sorted(got, key=int) == [b"%d" % i for i in range(n)]


@pytest.mark.asyncio
async def test_atransaction_commits_aborts_and_releases(jq):
    r = jq.reader("r")
    a, _ = jq.put_many([b"a", b"b"])
    async with r.atransaction(timeout=1) as item:
        assert item.data == b"a" and len(r.core.open) == 1
    assert r.head == a + 1
    with pytest.raises(Boom):
        async with r.atransaction() as item:
            raise Boom
    item = await r.aget()
    assert (item.data, item.error_count) == (b"b", 1)
    r.abort(item)

    async def hold() -> None:
        async with r.atransaction():
            await asyncio.sleep(3600)

    task = asyncio.create_task(hold())
    while not r.core.open:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    item = r.get(block=False)
    assert (item.data, item.error_count) == (b"b", 2)  # the cancel added no error


@pytest.mark.asyncio
async def test_async_for_commits_each_item_when_the_next_is_requested(jq):
    r = jq.reader("r")
    ids = jq.put_many([b"a", b"b", b"c"])
    seen = []
    async for item in r.aiter(timeout=0.01):
        assert len(r.core.open) == 1 and r.head == item.id
        seen.append(item.data)
    assert seen == [b"a", b"b", b"c"]
    assert r.head == ids[-1] + 1


@pytest.mark.asyncio
async def test_async_for_break_and_exception_give_the_item_back(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])
    async with r.aiter(timeout=0.01) as items:
        async for item in items:
            break
    item = r.get(block=False)
    assert (item.data, item.error_count) == (b"a", 0)
    r.release(item)
    with pytest.raises(Boom):
        async with r.aiter(timeout=0.01) as items:
            async for item in items:
                raise Boom
    item = r.get(block=False)
    assert (item.data, item.error_count) == (b"a", 1)


@pytest.mark.asyncio
async def test_async_for_over_a_reader_ends_when_the_queue_closes(qdir):
    q = JournaledQueue(qdir)
    r = q.reader("r")
    q.put(b"a")
    seen = []

    async def consume() -> None:
        async for item in r:
            seen.append(item.data)

    task = asyncio.create_task(consume())
    await until_waiting(r)
    q.close()
    await asyncio.wait_for(task, 30)
    assert seen == [b"a"]


@pytest.mark.asyncio
async def test_aput_runs_durable_puts_in_an_executor(qdir):
    with JournaledQueue(qdir, QueueConfig(sync="always")) as q:
        r = q.reader("r")
        threads = []
        real = q.put_many

        def spy(*args, **kwargs):
            threads.append(threading.current_thread())
            return real(*args, **kwargs)

        q.put_many = spy  # type: ignore[method-assign]
        item_id = await q.aput(b"durable")
        ids = await q.aput_many([b"x", b"y"], ttl=60)
        assert ids == [item_id + 1, item_id + 2]
        assert all(t is not threading.current_thread() for t in threads) and len(threads) == 2
    with JournaledQueue(qdir) as q:
        r = q.reader("r")
        assert [r.get(block=False).data for _ in range(3)] == [b"durable", b"x", b"y"]


@pytest.mark.asyncio
async def test_wrapper_async_methods(jq):
    tq = jq.transactional_queue("t")
    bq = jq.blocking_queue("b")
    assert await bq.aput(b"1")
    assert await bq.aget(timeout=1) == b"1"
    txn = await tq.aget(timeout=1)
    assert txn.item == b"1"
    txn.commit()


def test_a_waiter_whose_loop_closed_does_not_strand_the_item(jq):
    r = jq.reader("r")
    loop = asyncio.new_event_loop()
    task = loop.create_task(r.aget())
    loop.run_until_complete(until_waiting(r))
    loop.close()  # the task never finishes; its loop is gone
    jq.put(b"x")  # the hand-off finds the loop closed and gives the item back
    assert r.get(block=False).data == b"x"
    assert r.stats().open_reads == 1
    del task


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_cancellations_never_lose_or_strand_an_item(jq, seed):
    """Consumers with short timeouts are cancelled at random while a thread puts: every item is
    still committed exactly once, and nothing is left open or waiting."""
    import random

    rnd = random.Random(seed)
    r = jq.reader("r")
    n = 300
    got: list[bytes] = []

    async def consumer() -> None:
        while True:
            try:
                item = await r.aget(timeout=rnd.choice([0, 0.001, 0.01, None]))
            except Empty:
                await asyncio.sleep(0)
                continue
            r.commit(item)
            got.append(item.data)

    def produce() -> None:
        for i in range(n):
            jq.put(b"%d" % i)
            if i % 10 == 0:
                time.sleep(0.001)  # paced, so hand-offs race with cancellations (~5 per run)

    tasks = [asyncio.create_task(consumer()) for _ in range(4)]
    producer = threading.Thread(target=produce)
    producer.start()
    cancelled = 0
    while len(got) < n:
        await asyncio.sleep(rnd.random() * 0.002)
        k = rnd.randrange(len(tasks))
        tasks[k].cancel()
        try:
            await tasks[k]
        except asyncio.CancelledError:
            cancelled += 1
        tasks[k] = asyncio.create_task(consumer())
        assert cancelled < 100_000
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().run_in_executor(None, producer.join, 30)
    assert sorted(got, key=int) == [b"%d" % i for i in range(n)]
    assert not r.core.open and not r.core.waiters
    assert r.stats().aborted == 0
