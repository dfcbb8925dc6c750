"""The dashboard and the episode viewer over HTTP on a real server: access, live events, what they show and hide."""

import json
import threading
import time

import httpx
import pytest

from env_server.dashboard.access import COOKIE
from tests.env_server.conftest import make_settings, memory_backend
from tests.env_server.dashboard_support import FORGED_INIT, play, served_with_token, write
from tests.task_fixture import DEMO_TASK_ID, IO_CHECKS, ORIGINAL_OPS

TOKEN = "dashboard-test-token"
HOSTILE = "<script>document.title='owned'</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def guarded(memory_task_store, tmp_path_factory):
    """A server with a token; its dashboard refreshes five times a second."""
    folder = tmp_path_factory.mktemp("dash")
    with served_with_token(memory_backend(), memory_task_store, folder, TOKEN, refresh_s=0.2) as running:
        yield running


@pytest.fixture(scope="module")
def played(guarded):
    """An honest solution and a forged one, each after a command that prints hostile HTML."""
    echo = {"tool": "run", "args": {"command": f"echo {json.dumps(HOSTILE)}"}}
    honest = play(guarded.http_url, [echo, write("calc/ops.py", ORIGINAL_OPS)])
    forged = play(guarded.http_url, [echo, write("calc/__init__.py", FORGED_INIT)])
    return honest, forged


@pytest.fixture()
def browser(guarded):
    """A client signed in the way a browser is: through ?token= once, then by the cookie alone."""
    with httpx.Client(base_url=guarded.http_url, timeout=30) as http:
        signed = http.get("/dashboard", params={"token": TOKEN})
        assert signed.status_code == 303 and signed.headers["location"] == "/dashboard"
        yield http


def test_the_pages_refuse_a_visitor_without_the_token(guarded):
    with httpx.Client(base_url=guarded.http_url) as http:
        for path in ("/dashboard", "/episodes/anything/view"):
            page = http.get(path)
            assert page.status_code == 401 and '<input type="password" name="token"' in page.text
        wrong = http.get("/dashboard", params={"token": "guess"})
        assert wrong.status_code == 401 and "not this server" in wrong.text
        assert COOKIE not in wrong.cookies
        for path in ("/dashboard/snapshot", "/dashboard/events"):
            assert http.get(path).status_code == 401
        # The static files hold no data, so the sign-in page can be styled.
        assert http.get("/dashboard/static/regrow.css").status_code == 200


def test_signing_in_sets_a_strict_http_only_cookie_that_is_not_the_token(guarded):
    with httpx.Client(base_url=guarded.http_url) as http:
        signed = http.get("/episodes/abc/view", params={"token": TOKEN, "x": "1"})
        assert signed.status_code == 303 and signed.headers["location"] == "/episodes/abc/view?x=1"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert http.get("/dashboard").status_code == 200
    with httpx.Client(base_url=guarded.http_url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert http.get("/dashboard/snapshot").status_code == 200


def test_the_dashboard_shows_rates_rewards_flags_and_pass_rates(browser, played):
    honest, forged = played
    page = browser.get("/dashboard")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert f'href="/episodes/{honest}/view"' in page.text and f'href="/episodes/{forged}/view"' in page.text
    snapshot = browser.get("/dashboard/snapshot").json()
    rows = {row["episode_id"]: row for row in snapshot["recent"]}
    assert rows[honest]["reward"] == 1.0 and rows[honest]["flags"] == [] and rows[honest]["steps"] == 3
    assert rows[forged]["reward"] == 0.0 and rows[forged]["flags"][0].startswith("tampered")
    assert snapshot["rewards"]["tampered"] == 1 and snapshot["rewards"]["counts"][-1] == 1
    assert snapshot["rewards"]["counts"][0] == 1 and snapshot["rewards"]["by_status"]["submitted"] == 2
    (task,) = snapshot["tasks"]
    assert task == {"task_id": DEMO_TASK_ID, "episodes": 2, "graded": 2, "passed": 1, "mean_reward": 0.5, "tampered": 1}
    assert snapshot["latency_steps"] >= 6 and snapshot["latency_p95_s"] >= snapshot["latency_p50_s"] > 0
    assert snapshot["episodes_per_minute"] > 0 and sum(m["episodes"] for m in snapshot["minutes"]) >= 2
    assert snapshot["health"]["max_episodes"] == 4 and snapshot["pools"][0]["size"] == 1


def test_the_event_stream_sends_snapshots_that_follow_new_episodes(guarded, browser, played):
    def recorded(snapshot: dict) -> int:
        return sum(snapshot["rewards"]["by_status"].values())

    seen: list[dict] = []
    with browser.stream("GET", "/dashboard/events") as events:
        assert events.headers["content-type"].startswith("text/event-stream")
        for line in events.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[len("data: ") :]))
                if len(seen) == 1:
                    played_now = play(guarded.http_url, [])
                elif recorded(seen[-1]) > recorded(seen[0]):
                    break
    # The stream ends by itself after 120 s: reaching here without the new episode is the failure.
    assert recorded(seen[-1]) > recorded(seen[0]), f"{len(seen)} snapshots and none showed the new episode"
    assert played_now in {row["episode_id"] for row in seen[-1]["recent"]}
    assert seen[-1]["taken_at"] > seen[0]["taken_at"]


def test_the_viewer_shows_the_steps_the_diff_and_the_tests_and_escapes_what_the_agent_wrote(browser, played):
    honest, forged = played
    page = browser.get(f"/episodes/{honest}/view")
    assert page.status_code == 200, page.text
    text = page.text
    assert "<h2>Problem statement</h2>" in text and "clamp" in text
    assert text.count('class="step') >= 3 and "write_file" in text and "calc/ops.py" in text
    assert '<span class="d-file">+++ b/calc/ops.py</span>' in text and 'class="d-add"' in text
    assert "FAIL_TO_PASS <b>3/3</b>" in text and 'class="outcome-passed"' in text
    assert HOSTILE not in text and "&lt;script&gt;" in text
    assert f'href="/dashboard#task-{DEMO_TASK_ID}"' in text
    flagged = browser.get(f"/episodes/{forged}/view").text
    assert 'id="tampered"' in flagged and "check_records_forged" in flagged


def test_the_viewer_hides_hidden_checks_and_the_solution(guarded, browser, played):
    trace = guarded.runtime.traces.get_episode(played[1])
    hidden = [t for t in trace.reward_details.tests if t.group == "HIDDEN"]
    assert hidden, "the demo task has hidden checks"
    text = browser.get(f"/episodes/{played[1]}/view").text
    assert not any(t.nodeid in text for t in hidden)
    details = trace.reward_details
    assert details.hidden_total == sum(check.test is None for check in IO_CHECKS)  # the secret ones are counted
    shown = f'hidden checks <b id="hidden">{details.hidden_passed}/{details.hidden_total}</b>'
    assert shown in text and "The task's solution" not in text


def test_an_unknown_episode_is_a_404_page(browser):
    page = browser.get("/episodes/no-such-episode/view")
    assert page.status_code == 404 and "No episode no-such-episode" in page.text


def test_a_server_stops_while_a_dashboard_holds_its_event_stream_open(memory_task_store, tmp_path):
    from env_server.server import start_in_background

    settings = make_settings(
        memory_task_store, tmp_path, host="127.0.0.1", port=0, grpc_port=0, warm_pool_total=0, dashboard_refresh_s=0.2
    )
    running = start_in_background(settings, memory_backend())
    received: list[str] = []
    errors: list[Exception] = []

    def watch() -> None:
        try:
            with httpx.Client(base_url=running.http_url, timeout=60) as http:
                with http.stream("GET", "/dashboard/events") as events:
                    for line in events.iter_lines():
                        received.append(line)
        except httpx.HTTPError as error:  # the stream cut by uvicorn's graceful timeout, not ended by the server
            errors.append(error)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    deadline = time.monotonic() + 60
    while not any(line.startswith("data: ") for line in received) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(line.startswith("data: ") for line in received), "the stream sent no snapshot"
    running.stop()
    # The stop closes the stream instead of waiting on it (uvicorn's graceful timeout, then the runtime's flag).
    watcher.join(timeout=30)
    assert not running._thread.is_alive() and not watcher.is_alive()
    assert errors == []  # the stream ended as a stream ends, before the graceful timeout had to cut it


def test_the_viewer_folds_the_pass_to_pass_tests_that_still_pass(browser, played):
    """A real suite has hundreds of them (six: 181); the tests a reader looks for stay in the open table."""
    text = browser.get(f"/episodes/{played[0]}/view").text
    open_table, _, folded = text.partition('<details id="tests-kept">')
    assert "3 PASS_TO_PASS test(s) still pass" in folded and folded.count("<td>PASS_TO_PASS</td>") == 3
    assert "<td>PASS_TO_PASS</td>" not in open_table and open_table.count("<td>FAIL_TO_PASS</td>") == 3
