"""`regrow stack`'s own logic, with the `docker` CLI answered by hand: which nodes it waits for, at which URLs."""

import json

from regrow.stack import cli as stack_cli
from tests.regrow.test_swarm import answer as answer_with


def node(hostname, addr, state="ready", availability="active", manager_addr=None):
    spec = {
        "Description": {"Hostname": hostname},
        "Status": {"State": state, "Addr": addr},
        "Spec": {"Availability": availability},
    }
    if manager_addr:
        spec["ManagerStatus"] = {"Addr": manager_addr}
    return spec


def answer(monkeypatch, replies):
    answer_with(monkeypatch, replies, stack_cli)


def test_only_ready_active_nodes_are_waited_for_and_a_manager_at_0000_is_named_by_its_manager_address(monkeypatch):
    nodes = [
        node("m1", "0.0.0.0", manager_addr="10.0.0.1:2377"),
        node("w1", "10.0.0.2"),
        node("drained", "10.0.0.3", availability="drain"),
        node("down", "10.0.0.4", state="down"),
    ]
    answer(monkeypatch, {"node ls": "a\nb\nc\nd\n", "node inspect": json.dumps(nodes)})
    assert stack_cli.active_nodes() == [stack_cli.Node("m1", "10.0.0.1"), stack_cli.Node("w1", "10.0.0.2")]


def test_node_urls_bracket_ipv6():
    assert stack_cli.node_url(stack_cli.Node("a", "127.0.0.1"), 8000) == "http://127.0.0.1:8000"
    assert stack_cli.node_url(stack_cli.Node("b", "fd00::1"), 8000) == "http://[fd00::1]:8000"


def test_the_default_stack_file_is_the_repositorys_swarm_yaml():
    """`regrow stack deploy` defaults to deploy/swarm.yaml; moving the command into regrow/stack/ had left the path
    one folder short, and the deploy failed with no such file."""
    from regrow.stack.cli import STACK_FILE

    assert STACK_FILE.is_file() and STACK_FILE.parts[-2:] == ("deploy", "swarm.yaml")
