"""The env pool's I/O: reading each server's /health, resolving a name to its servers, spreading episodes."""

import asyncio
import socket

import httpx
import pytest

from proto import ToolCall
from tests.live_process import free_port
from tests.trainer_client.scripted_env import serve_scripted_env
from trainer_client.env.env_pool import EnvPool, health_url, read_health, resolved_urls
from trainer_client.env.server_pool import HealthRead


async def test_openenvs_own_health_reads_as_healthy_with_unknown_slots(scripted_env_url):
    async with httpx.AsyncClient() as http:
        assert await read_health(http, scripted_env_url, timeout_s=10) == HealthRead(True)


async def test_a_server_health_answer_gives_its_free_slots():
    with serve_scripted_env(max_sessions=8, free_slots=5) as url:
        async with httpx.AsyncClient() as http:
            assert await read_health(http, url, timeout_s=10) == HealthRead(True, free_slots=5)


async def test_a_server_that_does_not_answer_reads_as_down_with_the_reason():
    async with httpx.AsyncClient() as http:
        read = await read_health(http, f"http://127.0.0.1:{free_port()}", timeout_s=5)
    assert not read.healthy and "no answer to /health" in (read.reason or "")


def test_health_sits_beside_the_websocket():
    assert health_url("ws://env:8000/ws") == "http://env:8000/health"
    assert health_url("https://env.example/base/") == "https://env.example/base/health"


async def test_a_name_with_several_addresses_becomes_one_server_per_address(monkeypatch):
    async def two_hosts(host, port, **kwargs):
        assert host == "envs.internal"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in ("10.1.0.1", "10.1.0.2")]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", two_hosts)
    urls = await resolved_urls(["http://envs.internal:8000", "http://127.0.0.1:9"])
    assert urls == ["http://10.1.0.1:8000", "http://10.1.0.2:8000", "http://127.0.0.1:9"]


async def test_episodes_spread_over_the_servers_by_their_free_slots():
    with serve_scripted_env(free_slots=6) as roomy, serve_scripted_env(free_slots=1) as tight:
        pool = await EnvPool([roomy, tight], max_connections=1, health_interval_s=60).start()
        try:
            for _ in range(30):
                async with pool.episode(task_id="calc") as episode:
                    await episode.step(ToolCall(tool="submit"))
        finally:
            await pool.aclose()
    started = {url: server.started for url, server in pool.pool.servers.items()}
    assert started[roomy] + started[tight] == 30
    assert started[roomy] >= 18  # 6 of 7 slots: 25.7 of 30 expected, 18 is four standard deviations below


@pytest.mark.parametrize("scheme", ["http", "ws"])
async def test_a_server_the_pool_cannot_reach_is_named_down(scheme):
    dead = f"{scheme}://127.0.0.1:{free_port()}"
    pool = await EnvPool([dead], health_interval_s=60).start()
    try:
        assert pool.describe().startswith(f"{dead}: down (no answer to /health")
    finally:
        await pool.aclose()


@pytest.mark.parametrize("serving", [True, False])
async def test_a_grpc_server_is_read_through_the_standard_health_service(serving):
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    await servicer.set("", status)
    await server.start()
    try:
        async with httpx.AsyncClient() as http:
            read = await read_health(http, f"grpc://127.0.0.1:{port}", timeout_s=10)
    finally:
        await server.stop(None)
    assert read == (HealthRead(True) if serving else HealthRead(False, reason="gRPC health: not serving"))


async def test_a_server_full_of_our_own_idle_sessions_still_takes_our_episodes():
    reported = {"free": 1}
    with serve_scripted_env(max_sessions=1, free_slots=lambda: reported["free"]) as url:
        pool = await EnvPool([url], max_connections=1, health_interval_s=60).start()
        try:
            async with pool.episode(task_id="calc") as episode:
                await episode.step(ToolCall(tool="submit"))
            reported["free"] = 0  # the server counts our pooled session as taken
            await pool.refresh()
            async with pool.episode(task_id="calc") as episode:  # on that pooled session, not refused as full
                assert episode.reused
                await episode.step(ToolCall(tool="submit"))
        finally:
            await pool.aclose()
