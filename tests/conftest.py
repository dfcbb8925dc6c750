"""Shared fixtures: the real Docker engine, the base image, the train extra's gate, and a leak check after the suite."""

import importlib.util
import os
import re
import time

import pytest

from proto.openenv_types import leave_out_openenv_web_ui

# Test modules import OpenEnv's client before any regrow package does: spare each test process its gradio too.
leave_out_openenv_web_ui()

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The train extra is gated here and nowhere else (`make test-unit` runs on the core install, without it).
TRAIN_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "gguf")
TRAIN_EXTRA = all(importlib.util.find_spec(name) is not None for name in TRAIN_PACKAGES)
WITHOUT_TRAIN_EXTRA = "needs the train extra (torch, transformers, trl): `make setup` installs it"
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_MARKED_TRAIN = re.compile(r"^pytestmark = .*pytest\.mark\.train", re.MULTILINE)


def _docker_or_fail_or_skip():
    from sandbox import DockerBackend, DockerUnavailable

    try:
        return DockerBackend()
    except DockerUnavailable as error:
        if IN_CI:
            pytest.fail(f"CI=true and the Docker engine is required: {error}")
        pytest.skip(f"Docker engine not available: {error}")


@pytest.fixture(scope="session")
def docker_backend():
    """One DockerBackend for the session; fails (never skips) under CI=true when the engine is missing."""
    return _docker_or_fail_or_skip()


@pytest.fixture(scope="session")
def base_image(docker_backend) -> str:
    """The regrow base image tag, built from the apt mirror when missing."""
    from sandbox.lifecycle.base_image import BASE_IMAGE, build_base_image

    build_base_image(docker_backend, BASE_IMAGE)
    return BASE_IMAGE


@pytest.fixture(scope="session")
def train_extra() -> None:
    """Requested by every fixture that builds a model or a tokenizer: without the train extra, its tests skip."""
    if not TRAIN_EXTRA:
        pytest.skip(WITHOUT_TRAIN_EXTRA)


def pytest_collection_modifyitems(config, items):
    """A test that reaches the engine (or the train extra) through any fixture carries the docker (or train) marker,
    so `make test-unit` leaves it out; without the train extra, a test marked train skips."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "docker_backend" in fixtures:
            item.add_marker(pytest.mark.docker)
        if "train_extra" in fixtures:
            item.add_marker(pytest.mark.train)
        if not TRAIN_EXTRA and item.get_closest_marker("train"):
            item.add_marker(pytest.mark.skip(reason=WITHOUT_TRAIN_EXTRA))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module that imports the train extra at its top skips whole where the extra is absent."""
    report = yield
    if report.failed and not TRAIN_EXTRA and isinstance(collector, pytest.Module):
        missing = _MISSING_MODULE.search(str(report.longrepr))
        if missing and missing.group(1).split(".")[0] in TRAIN_PACKAGES:
            if _MARKED_TRAIN.search(collector.path.read_text(encoding="utf-8")):
                report.outcome = "skipped"
                report.longrepr = (str(collector.path), 0, f"Skipped: {WITHOUT_TRAIN_EXTRA}")
            else:  # unmarked, `-m train` would never pick it up, and no lane would run it
                report.longrepr = (
                    f"{collector.path} imports the train extra at its top: mark it `pytestmark = pytest.mark.train`"
                )
    return report


def _leftovers(client, owner_filters) -> list[dict]:
    # A container the engine is still removing is listed too ("Removal In Progress"): give it time to go.
    deadline = time.monotonic() + 60
    while True:
        left = client.api.containers(all=True, filters=owner_filters)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if any container this test process created is still there."""
    try:
        import docker

        from sandbox.lifecycle.owner import MANAGED_LABEL, OWNER_LABEL, current_owner

        client = docker.from_env()
        left = _leftovers(client, {"label": [f"{MANAGED_LABEL}=1", f"{OWNER_LABEL}={current_owner()}"]})
    except Exception:  # no engine: the docker tests have already failed or skipped
        return
    if left:
        for container in left:
            try:
                client.api.remove_container(container["Id"], force=True)
            except docker.errors.APIError as error:  # gone meanwhile, or its removal already under way
                print(f"\ncould not remove leftover {container['Id'][:12]}: {error}")
        print(f"\nLEAK: {len(left)} sandbox container(s) outlived the test suite: {[c['Id'][:12] for c in left]}")
        session.exitstatus = 1
