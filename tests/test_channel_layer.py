"""The embedded server's channel layer: a message published from another thread (the
scheduler's, an agent's) wakes a consumer waiting on the server's event loop at once."""

import asyncio
import threading
import time

from asgiref.sync import async_to_sync

from mlsched_site.layers import ThreadSafeInMemoryChannelLayer


def waited_for_a_send_from_another_thread(layer) -> tuple[dict, float]:
    """(the message received, seconds the receiver waited after it was sent), the receiver
    on this thread's loop, the sender on a thread without one, as the scheduler publishes."""

    async def receive():
        channel = await layer.new_channel()
        await layer.group_add("tenant-1", channel)
        sent = []

        def publish():
            time.sleep(0.2)  # the receiver waits first
            sent.append(time.monotonic())
            async_to_sync(layer.group_send)("tenant-1", {"type": "job.changes", "changes": []})

        threading.Thread(target=publish).start()
        message = await asyncio.wait_for(layer.receive(channel), 10)
        return message, time.monotonic() - sent[0]

    return asyncio.run(receive())


def test_a_message_from_another_thread_wakes_the_waiting_consumer_at_once():
    message, waited = waited_for_a_send_from_another_thread(ThreadSafeInMemoryChannelLayer())

    assert message == {"type": "job.changes", "changes": []}
    assert waited < 1.0  # Channels' own layer: until something else wakes the loop (10 s here)
