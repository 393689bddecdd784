"""The SSE event store behind resumable streams (server/http.py ``RecentEvents``): a client reconnecting with
``Last-Event-ID`` gets exactly the later events of its own stream; what fell out of the bounded window is not
replayed (the client re-reads the state instead)."""

from __future__ import annotations

import anyio
from mcp.types import JSONRPCNotification
from pypto_tune.server.http import RecentEvents


def _note(n: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"progress": n})


def test_replay_sends_the_later_events_of_the_same_stream_only() -> None:
    async def scenario() -> None:
        store = RecentEvents(keep=4)
        prime = await store.store_event("a", None)  # the priming event of stream a
        first = await store.store_event("a", _note(1))
        await store.store_event("b", _note(99))
        await store.store_event("a", _note(2))
        got: list[tuple[str | None, int]] = []

        async def send(event) -> None:  # noqa: ANN001 - the SDK's EventMessage
            got.append((event.event_id, event.message.params["progress"]))

        assert await store.replay_events_after(prime, send) == "a"
        assert [p for _, p in got] == [1, 2]
        got.clear()
        assert await store.replay_events_after(first, send) == "a" and [p for _, p in got] == [2]
        await store.store_event("a", _note(3))  # the window keeps 4: the priming event falls out
        got.clear()
        assert await store.replay_events_after(prime, send) is None and got == []

    anyio.run(scenario)
