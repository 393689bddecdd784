"""Streamable HTTP transport: loopback with DNS-rebinding protection by default; a bearer token when asked; CORS for
the origins the user allows.

Why: a browser page on the user's machine can reach 127.0.0.1, so Host/Origin checks stop DNS rebinding; beyond
loopback anybody on the network could drive a server that edits source files and runs code, so a token is required.
A browser-based client on another origin first sends a CORS preflight (``OPTIONS`` with ``Origin`` and
``Access-Control-Request-*``); browsers never attach credentials to it, so it is answered without the token — but
only for an allowed origin, and the answer grants nothing by itself: the real request still needs the token.

Every SSE stream is resumable (``RecentEvents``): a client whose connection drops during a minutes-long
``run_precision_check`` reconnects with ``Last-Event-ID`` and receives the progress and the result it missed.
"""

from __future__ import annotations

import hmac
import ipaddress
import itertools
import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import JSONRPCMessage

CORS_METHODS = b"GET, POST, DELETE, OPTIONS"
# what an MCP client sends and must read back (the session id and protocol version travel in headers)
CORS_HEADERS = b"authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version"
CORS_EXPOSE = b"mcp-session-id, mcp-protocol-version, www-authenticate"
RETRY_MS = 2000  # the reconnection delay suggested to clients on every SSE stream
KEPT_EVENTS = 5000  # per server: progress every 2 s for the trials of a batch fits many times over


class RecentEvents(EventStore):
    """The last ``KEPT_EVENTS`` SSE events in memory, for ``Last-Event-ID`` replay. Bounded on purpose: a client
    that was away longer than that re-reads the state (get_status, wait_job) instead of replaying."""

    def __init__(self, keep: int = KEPT_EVENTS) -> None:
        self._keep = keep
        self._ids = itertools.count(1)
        self._events: OrderedDict[str, tuple[str, JSONRPCMessage | None]] = OrderedDict()

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(next(self._ids))
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self._keep:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        if last_event_id not in self._events:
            return None
        stream_id = self._events[last_event_id][0]
        after = False
        for event_id, (sid, message) in list(self._events.items()):
            if after and sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id


def is_loopback(host: str) -> bool:
    """``localhost``, any 127.0.0.0/8 address, or ::1 (with or without brackets)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    """An address as it appears in a Host header or an origin: IPv6 in brackets."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def allowed_origins(host: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    hosts = {_url_host(h) for h in (host, "127.0.0.1", "localhost", "::1")}
    return sorted({f"http://{h}:{port}" for h in hosts} | {o.rstrip("/") for o in extra})


def security_for(host: str, port: int, extra_origins: Iterable[str] = ()) -> TransportSecuritySettings:
    hosts = {_url_host(h) for h in (host, "127.0.0.1", "localhost", "::1")}
    allowed_hosts = sorted({f"{h}:{port}" for h in hosts} | hosts)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts,
                                     allowed_origins=allowed_origins(host, port, extra_origins))


class HttpGuard:
    """ASGI middleware in front of the MCP app: CORS preflights, the bearer token, CORS headers on answers.

    ``token`` None means no token is required (loopback). ``origins`` are the browser origins allowed to call;
    ``hosts`` (when DNS-rebinding protection is on) the Host values a preflight may carry — the MCP app checks the
    other requests itself.
    """

    def __init__(self, app: Any, *, token: str | None, origins: Iterable[str], hosts: Iterable[str] | None) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self._origins = {o.encode() for o in origins}
        self._hosts = None if hosts is None else {h.encode() for h in hosts}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        cors = self._cors_headers(origin)
        if scope.get("method") == "OPTIONS" and origin is not None and b"access-control-request-method" in headers:
            if self._hosts is not None and headers.get(b"host") not in self._hosts:
                await _answer(send, 421, {"error": "invalid Host header"})
            elif not cors:
                await _answer(send, 403, {"error": f"origin {origin.decode(errors='replace')} is not allowed; "
                                                   "start the server with --allow-origin ORIGIN to allow it"})
            else:
                await _answer(send, 204, None, cors + [(b"access-control-allow-methods", CORS_METHODS),
                                                       (b"access-control-allow-headers", CORS_HEADERS),
                                                       (b"access-control-max-age", b"600")])
            return
        if self._token is not None and not self._token_ok(headers.get(b"authorization", b"")):
            # CORS headers on the refusal too, so that an allowed browser client can read why it was refused
            await _answer(send, 401, {"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
                          cors + [(b"www-authenticate", b"Bearer")])
            return
        if not cors:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _token_ok(self, value: bytes) -> bool:
        # RFC 6750 / 9110: the scheme is case-insensitive and followed by one or more spaces
        parts = value.strip().split(None, 1)
        if len(parts) != 2 or parts[0].lower() != b"bearer":
            return False
        assert self._token is not None
        return hmac.compare_digest(parts[1].strip(), self._token)

    def _cors_headers(self, origin: bytes | None) -> list[tuple[bytes, bytes]]:
        if origin is None or origin.rstrip(b"/") not in self._origins:
            return []
        return [(b"access-control-allow-origin", origin), (b"vary", b"Origin"),
                (b"access-control-expose-headers", CORS_EXPOSE)]


async def _answer(send: Any, status: int, body: dict[str, Any] | None,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = b"" if body is None else json.dumps(body).encode()
    head = list(headers or [])
    if body is not None:
        head.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


def build_http_app(mcp: MCPServer, *, host: str, port: int, token: str | None,
                   extra_origins: Iterable[str] = ()) -> Any:
    extra = list(extra_origins)
    security = security_for(host, port, extra)
    hosts: list[str] | None = security.allowed_hosts
    if token and not is_loopback(host):
        # Reached from other machines by names we cannot list; the bearer token is the guard there (a rebinding
        # page cannot send it), so the Host/Origin allow-list would only lock out legitimate clients.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        hosts = None
    app = mcp.streamable_http_app(transport_security=security, host=host, event_store=RecentEvents(),
                                  retry_interval=RETRY_MS)
    return HttpGuard(app, token=token, origins=allowed_origins(host, port, extra), hosts=hosts)


def run_http(mcp: MCPServer, *, host: str, port: int, token: str | None, extra_origins: Iterable[str] = ()) -> None:
    import uvicorn

    app = build_http_app(mcp, host=host, port=port, token=token, extra_origins=extra_origins)
    uvicorn.run(app, host=host.strip("[]"), port=port, log_level="warning")
