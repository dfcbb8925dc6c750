"""What the stack commands ask of the engine: a swarm manager (the `docker` CLI answered by hand), and the removal of
the sandboxes that removed servers left (on the engine)."""

import pytest

from regrow.stack import swarm


def answer(monkeypatch, replies, module=swarm):
    """`module.docker` answers each command by the first of `replies` whose key starts it."""

    def docker(*args, **_):
        for prefix, reply in replies.items():
            if " ".join(args).startswith(prefix):
                return reply
        raise AssertionError(f"unexpected docker {args}")

    monkeypatch.setattr(module, "docker", docker)


@pytest.mark.parametrize(
    ("info", "remedy"),
    [("inactive false", "docker swarm init"), ("active false", "on a manager"), ("pending false", "docker swarm init")],
)
def test_stack_commands_refuse_an_engine_that_is_no_swarm_manager(monkeypatch, info, remedy):
    answer(monkeypatch, {"info": info})
    with pytest.raises(swarm.StackError, match=remedy):
        swarm.check_manager()


def test_the_sandboxes_of_removed_servers_are_removed_and_counted(docker_backend, base_image):
    """On the engine; the 'server' here is a running container, so that no other test's reaper takes its sandbox
    first (a reaper takes a sandbox once its owner container stops)."""
    from sandbox.lifecycle.owner import OWNER_CONTAINER_LABEL

    with docker_backend.create(base_image) as server, docker_backend.create(base_image) as bystander:
        left = docker_backend.create(base_image, labels={OWNER_CONTAINER_LABEL: server.id})
        assert swarm.remove_sandboxes_of({server.id}) == 1
        assert not docker_backend.container_running(left.id)
        assert docker_backend.container_running(server.id) and docker_backend.container_running(bystander.id)
