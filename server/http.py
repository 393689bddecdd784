"""Streamable HTTP transport: loopback with DNS-rebinding protection by default; a bearer token when asked.

Why both: a browser page on the user's machine can reach 127.0.0.1, so Host/Origin checks stop DNS rebinding; beyond
loopback anybody on the network could drive a server that edits source files and runs code, so a token is required.
"""

from __future__ import annotations

import hmac
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings


class BearerTokenMiddleware:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            headers = dict(scope.get("headers") or [])
            got = headers.get(b"authorization", b"")
            if not hmac.compare_digest(got, self._expected):
                body = b'{"error": "missing or wrong bearer token (Authorization: Bearer <token>)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def security_for(host: str, port: int) -> TransportSecuritySettings:
    hosts = {host, "127.0.0.1", "localhost", "[::1]"}
    allowed_hosts = [f"{h}:{port}" for h in hosts] + sorted(hosts)
    allowed_origins = [f"http://{h}:{port}" for h in hosts]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts,
                                     allowed_origins=allowed_origins)


def build_http_app(mcp: MCPServer, *, host: str, port: int, token: str | None) -> Any:
    security = security_for(host, port)
    if token and host not in ("127.0.0.1", "localhost", "::1"):
        # Reached from other machines by names we cannot list; the bearer token is the guard there (a rebinding
        # page cannot send it), so the Host/Origin allow-list would only lock out legitimate clients.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = mcp.streamable_http_app(transport_security=security, host=host)
    return BearerTokenMiddleware(app, token) if token else app


def run_http(mcp: MCPServer, *, host: str, port: int, token: str | None) -> None:
    import uvicorn

    app = build_http_app(mcp, host=host, port=port, token=token)
    uvicorn.run(app, host=host, port=port, log_level="warning")
