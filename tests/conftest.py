"""Shared fixtures: the real Docker engine, the base image, and a leak check after the suite."""

import os
import time

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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


def pytest_collection_modifyitems(config, items):
    """A test that reaches the engine through any fixture carries the docker marker, so `make test-fast` leaves it
    out."""
    for item in items:
        if "docker_backend" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)


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
