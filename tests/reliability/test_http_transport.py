"""HTTP transport guards: loopback + DNS-rebinding protection by default, non-loopback needs a flag and a token,
and the token is enforced by the middleware on every request."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client

from tests.reliability.helpers import free_port, kill_group, serve_cmd, start_http

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                   "clientInfo": {"name": "attacker", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory):
    ws = tmp_path_factory.mktemp("http-ws")
    port = free_port()
    proc = start_http(ws, port)
    yield port
    kill_group(proc.pid)
    proc.wait()


def test_real_mcp_client_over_streamable_http_lists_tools(http_server: int) -> None:
    async def go() -> set[str]:
        async with Client(f"http://127.0.0.1:{http_server}/mcp") as c:
            return {t.name for t in (await c.list_tools()).tools}

    names = anyio.run(go)
    assert {"start_session", "get_status", "apply_tuning_patch"} <= names


def test_dns_rebinding_bad_host_header_is_refused_421(http_server: int) -> None:
    r = httpx.post(f"http://127.0.0.1:{http_server}/mcp", json=INIT,
                   headers={**ACCEPT, "Host": "evil.example:80"}, timeout=5)
    assert r.status_code == 421


def test_dns_rebinding_bad_origin_is_refused_403(http_server: int) -> None:
    r = httpx.post(f"http://127.0.0.1:{http_server}/mcp", json=INIT,
                   headers={**ACCEPT, "Origin": "http://evil.example"}, timeout=5)
    assert r.status_code == 403


def test_good_host_and_origin_are_accepted(http_server: int) -> None:
    r = httpx.post(f"http://127.0.0.1:{http_server}/mcp", json=INIT,
                   headers={**ACCEPT, "Origin": f"http://127.0.0.1:{http_server}"}, timeout=5)
    assert r.status_code == 200


def _run_cli(ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(serve_cmd(ws, "--transport", "http", "--port", str(free_port()), *extra),
                          cwd=ws, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})  # no PYPTO_TUNE_TOKEN leaking in from the caller


def test_binding_all_interfaces_without_allow_remote_exits_2(tmp_path: Path) -> None:
    r = _run_cli(tmp_path, "--host", "0.0.0.0")
    assert r.returncode == 2
    assert "refusing to bind 0.0.0.0" in r.stderr and "--allow-remote" in r.stderr


def test_allow_remote_without_token_exits_2(tmp_path: Path) -> None:
    r = _run_cli(tmp_path, "--host", "0.0.0.0", "--allow-remote")
    assert r.returncode == 2
    assert "bearer token" in r.stderr and "--token" in r.stderr


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory):
    ws = tmp_path_factory.mktemp("http-token-ws")
    port = free_port()
    proc = start_http(ws, port, "--token", "s3cret-token")
    yield port
    kill_group(proc.pid)
    proc.wait()


@pytest.mark.parametrize("auth", [None, "Bearer wrong", "s3cret-token", "Bearer s3cret-token-and-more", "Basic x"])
def test_missing_or_wrong_bearer_token_is_refused_401(token_server: int, auth: str | None) -> None:
    headers = dict(ACCEPT)
    if auth is not None:
        headers["Authorization"] = auth
    r = httpx.post(f"http://127.0.0.1:{token_server}/mcp", json=INIT, headers=headers, timeout=5)
    assert r.status_code == 401
    assert "bearer token" in r.text


def test_correct_bearer_token_lets_a_real_client_in(token_server: int) -> None:
    async def go() -> int:
        http = httpx.AsyncClient(headers={"Authorization": "Bearer s3cret-token"})
        from mcp.client.streamable_http import streamable_http_client
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{token_server}/mcp", http_client=http)) as c:
            return len((await c.list_tools()).tools)

    assert anyio.run(go) > 5


def test_remote_client_with_token_reaches_a_server_bound_to_all_interfaces(tmp_path: Path) -> None:
    port = free_port()
    proc = start_http(tmp_path, port, "--host", "0.0.0.0", "--allow-remote", "--token", "tok")
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", json=INIT, timeout=5,
                       headers={**ACCEPT, "Authorization": "Bearer tok", "Host": f"tuner.lan:{port}"})
        assert r.status_code == 200, r.text
    finally:
        kill_group(proc.pid)
        proc.wait()


def test_server_bound_to_all_interfaces_still_requires_the_token(tmp_path: Path) -> None:
    port = free_port()
    proc = start_http(tmp_path, port, "--host", "0.0.0.0", "--allow-remote", "--token", "tok")
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers=ACCEPT, timeout=5)
        assert r.status_code == 401
    finally:
        kill_group(proc.pid)
        proc.wait()
