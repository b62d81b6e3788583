"""The embedded server's channel layer: Channels' in-memory one, safe to publish to from the
scheduler's and agents' threads."""

import asyncio

from channels.layers import InMemoryChannelLayer


class ThreadSafeInMemoryChannelLayer(InMemoryChannelLayer):
    """Channels' in-memory layer keeps its queues for the event loop its consumers receive on.
    A thread without that loop (the scheduler's, an agent's, publishing through async_to_sync)
    would put into them from another loop: a consumer waiting there is not woken until
    something else wakes the loop, and the queues are touched from two threads at once. Such
    a send is handed to the receivers' loop instead."""

    _loop: asyncio.AbstractEventLoop | None = None

    async def receive(self, channel):
        self._loop = asyncio.get_running_loop()
        return await super().receive(channel)

    async def send(self, channel, message):
        await self._on_receivers_loop(super().send(channel, message))

    async def group_send(self, group, message):
        await self._on_receivers_loop(super().group_send(group, message))

    async def _on_receivers_loop(self, step) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or loop is asyncio.get_running_loop():
            await step
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(step, loop))
