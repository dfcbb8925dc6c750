import pytest

from sandbox import Limits


@pytest.fixture
def sandbox(docker_backend, base_image):
    """A fresh hardened sandbox from the base image, destroyed after the test."""
    with docker_backend.create(
        base_image, limits=Limits(memory_bytes=512 * 1024 * 1024), labels={"regrow.test": "sandbox"}
    ) as sb:
        yield sb
