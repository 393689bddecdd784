"""HTTP transport guards: loopback + DNS-rebinding protection by default, non-loopback needs a flag and a token,
the token is enforced by the middleware on every request (scheme case-insensitive), and CORS preflights of allowed
browser origins are answered without it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from pypto_tune.server.http import is_loopback

from tests.reliability.helpers import free_port, kill_group, serve_cmd, start_http

pytestmark = pytest.mark.process

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
    env = {"PATH": "/usr/bin:/bin"}  # no PYPTO_TUNE_TOKEN leaking in from the caller
    return subprocess.run(serve_cmd(ws, "--transport", "http", "--port", str(free_port()), *extra, env=env),
                          cwd=ws, capture_output=True, text=True, timeout=30, check=False, env=env)


def test_binding_all_interfaces_without_allow_remote_exits_2(tmp_path: Path) -> None:
    r = _run_cli(tmp_path, "--host", "0.0.0.0")
    assert r.returncode == 2
    assert "refusing to bind 0.0.0.0" in r.stderr and "--allow-remote" in r.stderr


def test_allow_remote_without_token_exits_2(tmp_path: Path) -> None:
    r = _run_cli(tmp_path, "--host", "0.0.0.0", "--allow-remote")
    assert r.returncode == 2
    assert "bearer token" in r.stderr and "--token" in r.stderr


APP_ORIGIN = "http://app.example:3000"  # a browser-based client the user allowed with --allow-origin


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory):
    ws = tmp_path_factory.mktemp("http-token-ws")
    port = free_port()
    proc = start_http(ws, port, "--token", "s3cret-token", "--allow-origin", APP_ORIGIN)
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


@pytest.mark.parametrize("auth", ["bearer s3cret-token", "BEARER s3cret-token", "Bearer   s3cret-token"])
def test_the_bearer_scheme_is_case_insensitive(token_server: int, auth: str) -> None:
    r = httpx.post(f"http://127.0.0.1:{token_server}/mcp", json=INIT, headers={**ACCEPT, "Authorization": auth},
                   timeout=5)
    assert r.status_code == 200, r.text


def _preflight(port: int, origin: str, **extra: str) -> httpx.Response:
    return httpx.options(f"http://127.0.0.1:{port}/mcp", timeout=5,
                         headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                  "Access-Control-Request-Headers": "authorization, content-type", **extra})


def test_a_cors_preflight_of_an_allowed_origin_needs_no_token(token_server: int) -> None:
    r = _preflight(token_server, APP_ORIGIN)
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"]
    assert "mcp-session-id" in r.headers["access-control-allow-headers"]


def test_a_cors_preflight_of_another_origin_is_refused(token_server: int) -> None:
    r = _preflight(token_server, "http://evil.example")
    assert r.status_code == 403 and "--allow-origin" in r.text
    assert "access-control-allow-origin" not in r.headers


def test_an_options_request_that_is_no_preflight_still_needs_the_token(token_server: int) -> None:
    r = httpx.options(f"http://127.0.0.1:{token_server}/mcp", headers={"Origin": APP_ORIGIN}, timeout=5)
    assert r.status_code == 401


def test_answers_to_an_allowed_origin_carry_cors_headers_and_the_token_is_still_required(token_server: int) -> None:
    ok = httpx.post(f"http://127.0.0.1:{token_server}/mcp", json=INIT, timeout=5,
                    headers={**ACCEPT, "Origin": APP_ORIGIN, "Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200, ok.text
    assert ok.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "mcp-session-id" in ok.headers["access-control-expose-headers"]
    refused = httpx.post(f"http://127.0.0.1:{token_server}/mcp", json=INIT, timeout=5,
                         headers={**ACCEPT, "Origin": APP_ORIGIN})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP_ORIGIN
    evil = httpx.post(f"http://127.0.0.1:{token_server}/mcp", json=INIT, timeout=5,
                      headers={**ACCEPT, "Origin": "http://evil.example", "Authorization": "Bearer s3cret-token"})
    assert evil.status_code == 403  # DNS-rebinding protection still checks the origin of real requests


def test_a_loopback_server_answers_a_preflight_of_its_own_origin_and_checks_the_host(http_server: int) -> None:
    own = f"http://127.0.0.1:{http_server}"
    assert _preflight(http_server, own).status_code == 204
    assert _preflight(http_server, own, Host="evil.example").status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.255.0.9", "localhost", "::1", "[::1]"])
def test_every_loopback_address_counts_as_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "example.com", "localhost.evil"])
def test_other_addresses_do_not(host: str) -> None:
    assert not is_loopback(host)


def test_a_server_on_127_0_0_2_starts_without_allow_remote_and_keeps_rebinding_protection(tmp_path: Path) -> None:
    port = free_port()
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(serve_cmd(tmp_path, "--transport", "http", "--host", "127.0.0.2", "--port", str(port),
                                      env=env),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env=env)
    try:
        url = f"http://127.0.0.2:{port}/mcp"
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            try:
                r = httpx.post(url, json=INIT, headers=ACCEPT, timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "server on 127.0.0.2 did not come up in 20 s"
                time.sleep(0.1)
        assert r.status_code == 200, r.text
        assert httpx.post(url, json=INIT, headers={**ACCEPT, "Host": "evil.example"}, timeout=5).status_code == 421
        assert httpx.post(url, json=INIT, headers={**ACCEPT, "Origin": "http://evil.example"},
                          timeout=5).status_code == 403
    finally:
        kill_group(proc.pid)
        proc.wait()
