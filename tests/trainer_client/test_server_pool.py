"""Choosing the env server for the next episode: by free slots, skipping the ones down, taking them back (no I/O)."""

import random
from collections import Counter

import pytest

from trainer_client.env.server_pool import HealthRead, ServerPool, env_urls, health_read, url_per_address

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


def draws(pool: ServerPool, n: int = 4000) -> Counter:
    return Counter(pool.choose() for _ in range(n))


def test_episodes_go_to_servers_in_proportion_to_their_free_slots():
    pool = ServerPool([A, B], rng=random.Random(0))
    pool.record_health(A, HealthRead(True, free_slots=6))
    pool.record_health(B, HealthRead(True, free_slots=2))
    counts = draws(pool)
    assert 0.70 < counts[A] / 4000 < 0.80  # 6 of 8 slots


def test_a_server_with_no_free_slot_gets_nothing():
    pool = ServerPool([A, B], rng=random.Random(0))
    pool.record_health(A, HealthRead(True, free_slots=0))
    pool.record_health(B, HealthRead(True, free_slots=3))
    assert set(draws(pool, 200)) == {B}


def test_servers_without_reported_slots_share_equally():
    pool = ServerPool([A, B, C], rng=random.Random(0))
    for url in (A, B, C):
        pool.record_health(url, HealthRead(True))
    counts = draws(pool, 3000)
    assert all(800 < counts[url] < 1200 for url in (A, B, C))


def test_a_server_of_unknown_slots_weighs_as_the_mean_of_the_known():
    pool = ServerPool([A, B, C], rng=random.Random(0))
    pool.record_health(A, HealthRead(True, free_slots=2))
    pool.record_health(B, HealthRead(True, free_slots=6))
    pool.record_health(C, HealthRead(True))
    assert pool.weights() == {A: 2.0, B: 6.0, C: 4.0}


def test_a_server_that_stops_answering_is_skipped_and_taken_back_when_healthy():
    pool = ServerPool([A, B], rng=random.Random(0))
    pool.record_health(A, HealthRead(False, reason="no answer to /health: ConnectError"))
    assert set(draws(pool, 200)) == {B}
    assert "down (no answer to /health: ConnectError)" in pool.describe()
    pool.record_health(A, HealthRead(True, free_slots=4))
    assert A in set(draws(pool, 200))


def test_a_failed_connect_skips_the_server_until_the_next_health_read():
    pool = ServerPool([A, B], rng=random.Random(0))
    pool.record_unreachable(A, "connection refused")
    assert set(draws(pool, 200)) == {B}
    pool.record_health(A, HealthRead(True))
    assert A in set(draws(pool, 200))


def test_no_server_with_room_means_none_and_says_why():
    pool = ServerPool([A, B])
    pool.record_unreachable(A, "connection refused")
    pool.record_full(B, "CAPACITY_REACHED")
    assert pool.choose() is None
    assert pool.any_healthy  # B answered: the caller backs off as at capacity, not as an outage
    pool.record_unreachable(B, "connection refused")
    assert pool.choose() is None and not pool.any_healthy
    assert pool.describe() == f"{A}: down (connection refused); {B}: down (connection refused)"


def test_started_episodes_use_up_the_reported_slots_until_they_finish():
    pool = ServerPool([A, B], rng=random.Random(0))
    pool.record_health(A, HealthRead(True, free_slots=1))
    pool.record_health(B, HealthRead(True, free_slots=1))
    first = pool.choose()
    assert first is not None
    pool.record_started(first)
    second = pool.choose()
    assert second is not None and second != first
    pool.record_started(second)
    assert pool.choose() is None
    pool.record_finished(first)
    assert pool.choose() == first


def test_our_idle_sessions_are_room_even_when_health_reports_none_free():
    pool = ServerPool([A, B], rng=random.Random(0))
    pool.record_health(A, HealthRead(True, free_slots=0))  # /health counts our open sessions as taken
    pool.record_health(B, HealthRead(True, free_slots=0))
    pool.record_idle(A, 2)
    assert pool.weights() == {A: 2.0, B: 0.0} and pool.choose() == A


def test_an_episode_on_a_kept_session_neither_takes_nor_returns_a_free_slot():
    pool = ServerPool([A])
    pool.record_health(A, HealthRead(True, free_slots=3))
    pool.record_started(A, new_session=False)
    pool.record_finished(A, session_closed=False)
    assert pool.servers[A].free_slots == 3
    pool.record_started(A, new_session=True)
    pool.record_finished(A, session_closed=False)  # the new session stays ours, idle: still taken on the server
    assert pool.servers[A].free_slots == 2


def test_an_unhealthy_answer_has_no_slots():
    pool = ServerPool([A])
    pool.record_health(A, HealthRead(False, free_slots=5, reason="engine unreachable"))
    assert pool.choose() is None and pool.weights() == {}


def test_a_new_resolution_keeps_what_is_known_of_remaining_servers():
    pool = ServerPool([A, B])
    pool.record_health(A, HealthRead(True, free_slots=3))
    pool.replace_urls([A, C])
    assert list(pool.servers) == [A, C] and pool.servers[A].free_slots == 3 and pool.servers[C].free_slots is None


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"status": "healthy"}, HealthRead(True)),  # OpenEnv's own /health
        (
            200,
            {"status": "healthy", "free_slots": 3, "max_episodes": 8, "active_episodes": 5},
            HealthRead(True, free_slots=3),
        ),
        (
            503,
            {"status": "unhealthy", "reason": "engine unreachable: refused", "free_slots": 0, "max_episodes": 8},
            HealthRead(False, reason="engine unreachable: refused"),
        ),
        (503, None, HealthRead(False, reason="/health answered HTTP 503")),
        (500, {"detail": "boom"}, HealthRead(False, reason="/health answered HTTP 500")),
    ],
)
def test_health_answers_are_read_tolerantly(status, body, expected):
    assert health_read(status, body) == expected


def test_a_health_body_that_is_not_a_server_health_is_unhealthy():
    read = health_read(200, {"status": "healthy", "free_slots": -1, "max_episodes": 8})
    assert not read.healthy and "not a ServerHealth" in (read.reason or "")


@pytest.mark.parametrize(
    "value",
    [
        [A, B],
        f"{A},{B}",
        f" {A} , {B} ",
        f'["{A}", "{B}"]',
        [f"{A},{B}"],
        [A, B, A + "/"],  # the same server twice is one server
    ],
)
def test_env_urls_come_as_a_list_a_comma_list_or_json(value):
    assert env_urls(value) == [A, B]


@pytest.mark.parametrize("bad", ["ftp://host:1", "localhost:8000", "http://", "http://host:notaport", ""])
def test_a_malformed_env_url_is_refused_with_the_form_to_use(bad):
    with pytest.raises(ValueError, match="http://host"):
        env_urls(bad)


def test_a_name_with_several_addresses_is_one_server_per_address():
    url = "http://envs.internal:8000"
    assert url_per_address(url, ["10.0.0.1", "10.0.0.2", "10.0.0.1"]) == [
        "http://10.0.0.1:8000",
        "http://10.0.0.2:8000",
    ]
    assert url_per_address("grpc://envs:50051", ["fd00::1", "fd00::2"]) == [
        "grpc://[fd00::1]:50051",
        "grpc://[fd00::2]:50051",
    ]


def test_a_name_with_one_address_or_localhosts_two_families_stays_as_given():
    assert url_per_address("http://localhost:8000", ["127.0.0.1", "::1"]) == ["http://localhost:8000"]
    assert url_per_address("http://env:8000", ["10.0.0.9"]) == ["http://env:8000"]
