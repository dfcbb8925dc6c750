"""The dashboard and the episode viewer in a real browser (Debian's headless chromium through Selenium): the live
numbers move without a reload, a tampered submission shows its flag, the viewer shows a recorded episode, and neither
page logs a console error (a Content-Security-Policy violation or a JS error). Full-page screenshots of both pages go
to $REGROW_TEST_ARTIFACTS (default .artifacts/screenshots/)."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import IN_CI
from tests.env_server.conftest import memory_backend
from tests.env_server.dashboard_support import FORGED_INIT, play, served_with_token, write
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS, WRONG_OPS

TOKEN = "dashboard-browser-token"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 60  # generous: the machine may be running the rest of the suite beside this
ARTIFACTS = Path(
    os.environ.get("REGROW_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / ".artifacts" / "screenshots"
)
WIDTH, HEIGHT = 1400, 1000

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served(memory_task_store, tmp_path_factory):
    """A server with a token; its dashboard sends a snapshot every 0.3 s."""
    folder = tmp_path_factory.mktemp("dash-browser")
    with served_with_token(memory_backend(), memory_task_store, folder, TOKEN, refresh_s=0.3) as running:
        yield running


@pytest.fixture(scope="module")
def driver(request):
    """Headless chromium driven by Debian's chromedriver; Selenium Manager never asked (and never goes online)."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        message = (
            f"the browser tests need {', '.join(missing)}: `make host-tools` installs chromium and chromium-driver"
        )
        if IN_CI:
            pytest.fail(f"CI=true and {message}")
        pytest.skip(message)
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={WIDTH},{HEIGHT}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    request.addfinalizer(chrome.quit)
    chrome.set_page_load_timeout(WAIT_S)
    return chrome


def wait_for(driver, condition: Callable[[], object], what: str):
    return WebDriverWait(
        driver, WAIT_S, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    ).until(lambda _: condition(), f"{what} within {WAIT_S} s")


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def number(driver, field: str) -> int:
    return int(js(driver, f"return document.querySelector('[data-field=\"{field}\"]').textContent.trim()"))


def updates(driver) -> int:
    return int(js(driver, "return document.getElementById('dashboard').dataset.updates || '0'"))


def live(driver) -> bool:
    return js(driver, "return document.getElementById('live').dataset.state") == "open" and updates(driver) >= 1


def row_selector(episode_id: str) -> str:
    return f'#recent tr[data-episode="{episode_id}"]'


def screenshot(driver, name: str) -> Path:
    """The whole page, not just the viewport: the window is made as tall as the page for the shot."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = int(js(driver, "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
    driver.set_window_size(WIDTH, max(HEIGHT, height + 150))
    try:
        path = ARTIFACTS / name
        assert driver.save_screenshot(str(path)), f"no screenshot written to {path}"
        return path
    finally:
        driver.set_window_size(WIDTH, HEIGHT)


@pytest.fixture(scope="module")
def dashboard(served, driver):
    """The dashboard, signed in through ?token= once, with its event stream connected and one snapshot applied."""
    driver.get(f"{served.http_url}/dashboard?token={TOKEN}")
    wait_for(driver, lambda: driver.current_url == f"{served.http_url}/dashboard", "the sign-in redirect")
    wait_for(driver, lambda: live(driver), "the event stream connected and a snapshot applied")
    js(driver, "window.__stayed = 1;")  # gone if the page is ever reloaded
    return driver


@pytest.fixture(scope="module")
def forged(served, dashboard):
    """A submission that disables pytest's test functions, played while the dashboard is open: (episode id, steps)."""
    steps = [{"tool": "run", "args": {"command": "ls calc"}}, write("calc/__init__.py", FORGED_INIT)]
    return play(served.http_url, steps), len(steps) + 1  # and the submit


def test_the_live_numbers_change_without_a_reload(served, dashboard):
    driver = dashboard
    before, applied = number(driver, "episodes_total"), updates(driver)
    honest = play(served.http_url, [write("calc/ops.py", ORIGINAL_OPS)])
    wait_for(driver, lambda: number(driver, "episodes_total") > before, "episodes_total going up")
    wait_for(driver, lambda: driver.find_elements(By.CSS_SELECTOR, row_selector(honest)), "the new episode's row")
    link = f"{row_selector(honest)} td:first-child a"  # read in one wait: a live refresh may replace the row
    wait_for(
        driver,
        lambda: driver.find_element(By.CSS_SELECTOR, link).get_attribute("href").endswith(f"/episodes/{honest}/view"),
        "the new episode's link to its viewer",
    )
    assert js(driver, "return window.__stayed") == 1, "the page was reloaded"
    assert updates(driver) > applied
    wait_for(driver, lambda: number(driver, "graded") >= 1, "the graded count going up")


def test_a_tampered_submission_shows_its_flag(served, dashboard, forged):
    driver = dashboard
    episode_id, _ = forged
    wait_for(
        driver,
        lambda: driver.find_elements(By.CSS_SELECTOR, f"{row_selector(episode_id)} span.flag.flag-tampered"),
        "the tampered flag in the forged episode's row",
    )
    assert number(driver, "tampered") >= 1
    assert js(driver, "return window.__stayed") == 1, "the page was reloaded"
    # An empty submission and a wrong one, so that the charts have more than one bar for the screenshot.
    empty = play(served.http_url, [])
    wrong = play(served.http_url, [write("calc/ops.py", WRONG_OPS)])
    for episode in (empty, wrong):  # graded, not still "running" from a snapshot taken before the submit
        submitted = f"{row_selector(episode)} span.status-submitted"
        wait_for(driver, lambda css=submitted: driver.find_elements(By.CSS_SELECTOR, css), f"{episode} submitted")
    screenshot(driver, "dashboard.png")


def test_the_viewer_shows_the_steps_of_a_recorded_episode(served, dashboard, forged):
    driver = dashboard
    episode_id, played_steps = forged
    graded = f"{row_selector(episode_id)} span.flag-tampered"  # recorded whole: graded, every step in
    wait_for(driver, lambda: driver.find_elements(By.CSS_SELECTOR, graded), "the forged row, graded")

    def click_link() -> bool:  # the live redraw replaces the rows every 0.3 s: a found link can go stale
        driver.find_element(
            By.CSS_SELECTOR, f'{row_selector(episode_id)} td:first-child a[href="/episodes/{episode_id}/view"]'
        ).click()
        return True

    wait_for(driver, click_link, "a click on the episode's link")
    wait_for(driver, lambda: driver.current_url == f"{served.http_url}/episodes/{episode_id}/view", "the viewer")
    assert driver.find_element(By.ID, "episode").get_attribute("data-episode") == episode_id
    assert len(driver.find_elements(By.CSS_SELECTOR, "#steps > li.step")) == played_steps
    assert driver.find_element(By.ID, "tampered").is_displayed()
    assert driver.find_elements(By.CSS_SELECTOR, "pre#diff span.d-add")
    assert driver.find_element(By.CSS_SELECTOR, "table#tests").is_displayed()
    screenshot(driver, "episode.png")

    driver.find_element(By.CSS_SELECTOR, 'a[href^="/dashboard#task-"]').click()
    wait_for(driver, lambda: driver.current_url == f"{served.http_url}/dashboard#task-{DEMO_TASK_ID}", "the dashboard")
    wait_for(driver, lambda: live(driver), "the dashboard live again")
    assert driver.find_elements(By.CSS_SELECTOR, row_selector(episode_id))


def test_neither_page_logs_a_console_error(served, dashboard, forged):
    """The first read of the log also holds what the tests above made the browser log: get_log drains it."""
    driver = dashboard
    for path in ("/dashboard", f"/episodes/{forged[0]}/view"):
        driver.get(f"{served.http_url}{path}")
        wait_for(driver, lambda: js(driver, "return document.readyState") == "complete", f"{path} loaded")
        if path == "/dashboard":
            wait_for(driver, lambda: live(driver), "the dashboard live")
        # The pages name no icon, so chromium asks for /favicon.ico, a 404: the one error that is not the page's.
        favicon = f"{served.http_url}/favicon.ico "
        log = driver.get_log("browser")
        severe = [e for e in log if e["level"] == "SEVERE" and not e["message"].startswith(favicon)]
        assert not severe, f"console errors on {path}: {severe}"
