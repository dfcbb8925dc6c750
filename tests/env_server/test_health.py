"""GET /health and the engine watch, without an engine: how often the engine is pinged, and what /health answers."""

import importlib.metadata
from types import SimpleNamespace

from fastapi.testclient import TestClient

from env_server.lifecycle.engine_watch import EngineStatus, EngineWatch, server_health
from env_server.observability.metrics import ServerMetrics
from env_server.settings import ServerSettings
from proto.health import ServerHealth


class FakeEngine:
    """A ping that answers as told, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.error: str | None = None
        self.recoveries = 0
        self.pool_died = False

    def ping(self) -> str | None:
        return self.error

    def recover(self) -> None:
        self.recoveries += 1

    def restarted(self) -> bool:
        died, self.pool_died = self.pool_died, False
        return died


def watch_of(engine: FakeEngine, interval_s: float = 5.0) -> EngineWatch:
    return EngineWatch(
        engine.ping, interval_s, recover=engine.recover, restarted=engine.restarted, clock=lambda: engine.now
    )


def test_the_engine_is_pinged_at_most_once_per_interval_however_often_health_is_asked():
    engine = FakeEngine()
    watch = watch_of(engine, interval_s=5.0)
    for _ in range(100):
        watch.check()
        _ = watch.status
    assert watch.pings == 1
    engine.now += 4.9
    watch.check()
    assert watch.pings == 1
    engine.now += 0.2
    watch.check()
    assert watch.pings == 2


def test_a_failed_step_checks_at_once_and_while_the_engine_is_away_no_more_than_once_a_second():
    engine = FakeEngine()
    watch = watch_of(engine, interval_s=30.0)
    watch.check()
    engine.error = "connection refused"
    engine.now += 0.1
    # The engine answered 0.1 s ago, but the step failed: only a ping now tells whether it died since.
    assert not watch.check(force=True).up
    assert watch.pings == 2
    engine.now += 0.5
    for _ in range(10):
        watch.check(force=True)
    assert watch.pings == 2
    engine.now += 0.6
    watch.check(force=True)
    assert watch.pings == 3


def test_an_engine_that_goes_away_is_reported_with_its_error_and_recovered_once_when_it_answers():
    engine = FakeEngine()
    changes: list[bool] = []
    watch = watch_of(engine, interval_s=1.0)
    watch.check()
    watch.on_change(changes.append)
    assert watch.status == EngineStatus(up=True, epoch=0) and engine.recoveries == 1  # start-up reaps and fills too

    engine.error = "no answer from unix:///run/docker.sock within 2s: connection refused"
    engine.now += 1
    assert watch.check() == EngineStatus(up=False, error=engine.error, epoch=0)
    engine.now += 1
    watch.check()
    assert engine.recoveries == 1

    engine.error = None
    engine.now += 1
    assert watch.check() == EngineStatus(up=True, epoch=1)
    assert engine.recoveries == 2
    assert changes == [True, False, True]


def test_a_restart_between_two_pings_shows_in_the_pools_stopped_containers_and_starts_a_new_epoch():
    engine = FakeEngine()
    watch = watch_of(engine, interval_s=1.0)
    watch.check()
    engine.pool_died = True
    engine.now += 1
    assert watch.check() == EngineStatus(up=True, epoch=1)
    assert engine.recoveries == 2


def test_a_failed_recovery_keeps_the_engine_counted_away_and_is_retried():
    engine = FakeEngine()
    watch = watch_of(engine, interval_s=1.0)

    def broken() -> None:
        raise RuntimeError("listing containers failed")

    watch._recover = broken
    status = watch.check()
    assert not status.up and "recovery failed: listing containers failed" in (status.error or "")
    watch._recover = engine.recover
    engine.now += 1
    assert watch.check().up


def test_health_is_503_material_with_the_engines_error_and_no_free_slot_while_the_engine_is_away():
    away = server_health(EngineStatus(up=False, error="connection refused"), 4, active=1, reserved=0)
    assert away == ServerHealth(
        status="unhealthy",
        reason="engine unreachable: connection refused",
        engine_up=False,
        free_slots=0,
        max_episodes=4,
        active_episodes=1,
        version=away.version,
    )
    assert away.version == importlib.metadata.version("regrow")
    up = server_health(EngineStatus(up=True), 4, active=1, reserved=1)
    assert (up.status, up.reason, up.free_slots) == ("healthy", None, 2)
    assert server_health(EngineStatus(up=True), 4, active=4, reserved=1).free_slots == 0
    blocked = server_health(EngineStatus(up=True), 4, 0, 0, blocker="the engine lacks the image(s) x")
    assert (blocked.status, blocked.free_slots) == ("unhealthy", 0)


def test_get_health_is_regrows_route_not_openenvs_always_healthy_one(tmp_path):
    from env_server.app import build_app

    answer = server_health(EngineStatus(up=False, error="connection refused"), 2, 0, 0)
    runtime = SimpleNamespace(
        settings=ServerSettings(tasks_dir=tmp_path, max_episodes=2), metrics=ServerMetrics(), health=lambda: answer
    )
    app = build_app(runtime)  # type: ignore[arg-type]
    assert [getattr(route, "path", None) for route in app.router.routes].count("/health") == 1
    with TestClient(app) as client:
        reply = client.get("/health")
    assert reply.status_code == 503
    assert ServerHealth.model_validate(reply.json()) == answer


def test_one_lost_ping_of_a_live_engine_is_asked_again_and_starts_no_new_epoch():
    engine = FakeEngine()
    answers: list[str | None] = []
    watch = EngineWatch(
        lambda: answers.pop(0) if answers else None, 5.0, recover=engine.recover, clock=lambda: engine.now
    )
    assert watch.check().up
    recoveries_at_start = engine.recoveries
    engine.now += 10
    answers.append("Read timed out. (read timeout=2.0)")

    status = watch.check()

    assert status.up and status.epoch == 0 and engine.recoveries == recoveries_at_start
    answers.extend(["connection refused", "connection refused"])
    engine.now += 10
    assert not watch.check().up  # an engine that is really gone still shows at the first check
