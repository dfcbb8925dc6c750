"""Impossible twins without an engine: how a twin contradicts its task, and how a store serves twins."""

from __future__ import annotations

import ast
import json
import random
import shutil
import sys
import types
from pathlib import Path
from unittest import mock

import pytest

from env_server.grading.twin_tests import IMPOSSIBLE, impossible_tests
from env_server.task_store import TaskStore
from proto.task_files import IO_CHECKS, TWIN_OF, TWINS, hidden_dir
from proto.tasks import IoCheck
from task_synth.store.twins import contradicted, twin_id, twin_of
from tests.task_fixture import DEMO_TASK_ID, F2P, ORIGINAL_OPS, P2P, TESTS, demo_record
from tests.task_fixture import IO_CHECKS as DEMO_CHECKS


@pytest.mark.parametrize("result", ["0", "-2.5", "True", "None", "'ab'", "b'x'", "[1, 2]", "(1,)", "{'a': 1}", "{1}"])
def test_a_contradicted_check_expects_another_value_of_the_same_call(result):
    check = IoCheck(module="m", qualname="f", args="(1,)", result=result, test=F2P[0])
    twin = contradicted(check, random.Random(0))
    assert (twin.module, twin.qualname, twin.args, twin.test) == (check.module, check.qualname, check.args, check.test)
    assert ast.literal_eval(twin.result or "None") != ast.literal_eval(result)


def test_a_raising_call_is_contradicted_by_a_returned_value():
    twin = contradicted(IoCheck(module="m", qualname="f", args="()", raises="ValueError"), random.Random(0))
    assert twin.raises is None and twin.result is not None


def test_a_twin_contradicts_every_check_and_looks_like_a_task():
    record = demo_record("img")
    made = twin_of(record, DEMO_CHECKS, random.Random(0))
    assert made is not None
    twin, checks = made
    assert twin.instance_id == twin_id(record.instance_id) != record.instance_id
    assert twin.instance_id.rsplit("__", 1)[0] == record.instance_id.rsplit("__", 1)[0]
    assert twin.problem_statement == record.problem_statement and twin.FAIL_TO_PASS == record.FAIL_TO_PASS
    assert twin.workspace_archive == f"workspaces/{twin.instance_id}.tar.gz"
    for before, after in zip(DEMO_CHECKS, checks, strict=True):
        assert (before.args, before.test) == (after.args, after.test) and before != after


def test_every_task_with_a_fail_to_pass_test_gets_a_twin():
    """A twin catches a forged report through its impossible tests, whatever checks the task has."""
    one_test = [check for check in DEMO_CHECKS if check.test == F2P[0]]
    assert twin_of(demo_record("img"), one_test, random.Random(0)) is not None
    assert twin_of(demo_record("img"), [], random.Random(0)) is not None
    no_tests = demo_record("img").model_copy(update={"FAIL_TO_PASS": []})
    assert twin_of(no_tests, DEMO_CHECKS, random.Random(0)) is None


def test_a_twins_fail_to_pass_tests_are_impossible_and_its_other_tests_are_untouched():
    """The twin's tests run against the original solution: each FAIL_TO_PASS test fails, each other test passes."""
    _, checks = twin_of(demo_record("img"), DEMO_CHECKS, random.Random(0)) or (None, [])
    files = impossible_tests({"tests/test_ops.py": TESTS.encode()}, F2P, checks)
    source = files["tests/test_ops.py"].decode()
    assert "== 10" not in source.split("def test_clamp_above")[1].split("def ")[0]  # the visible answer is gone
    original = types.ModuleType("calc.ops")
    exec(ORIGINAL_OPS, original.__dict__)
    calc = types.ModuleType("calc")
    calc.ops = original  # type: ignore[attr-defined]
    with_modules = {**sys.modules, "calc": calc, "calc.ops": original}
    scope: dict = {}
    with mock.patch.dict(sys.modules, with_modules):
        exec(compile(source, "tests/test_ops.py", "exec"), scope)
        for nodeid in [*F2P, *P2P]:
            name = nodeid.split("::")[1]
            if nodeid in F2P:
                with pytest.raises(Exception):  # noqa: B017  # failing is all an impossible test does
                    scope[name]()
            else:
                scope[name]()


def test_a_test_inside_a_class_gets_the_impossible_body_and_a_file_that_does_not_parse_is_left():
    source = b"import unittest\n\n\nclass TestOps(unittest.TestCase):\n    def test_one(self):\n"
    source += b"        self.assertTrue(True)\n"
    files = impossible_tests({"t.py": source, "bad.py": b"def (:\n"}, ["t.py::TestOps::test_one", "bad.py::x"], [])
    assert IMPOSSIBLE in files["t.py"].decode() and "assertTrue" not in files["t.py"].decode()
    assert files["bad.py"] == b"def (:\n"


def store_with_twin(root: Path) -> tuple[Path, str]:
    """A store of the demo record and its twin, as files (no images: the store is only read)."""
    record = demo_record("img")
    twin, checks = twin_of(record, DEMO_CHECKS, random.Random(0)) or (None, [])
    assert twin is not None
    for item, item_checks in ((record, DEMO_CHECKS), (twin, checks)):
        (root / (item.workspace_archive or "")).parent.mkdir(parents=True, exist_ok=True)
        (root / (item.workspace_archive or "")).write_bytes(b"")
        hidden = hidden_dir(root, item.instance_id)
        hidden.mkdir(parents=True)
        (hidden / IO_CHECKS).write_text(json.dumps([c.model_dump() for c in item_checks]))
    install = root / (record.repo_dir or "") / "install.tar.gz"
    install.parent.mkdir(parents=True)
    install.write_bytes(b"")
    (hidden_dir(root, twin.instance_id) / TWIN_OF).write_text(DEMO_TASK_ID + "\n")
    (root / "tasks.jsonl").write_text(record.model_dump_json() + "\n")
    (root / TWINS).write_text(twin.model_dump_json() + "\n")
    return root, twin.instance_id


def test_a_store_never_samples_a_twin_as_a_task_and_draws_twins_at_the_rate_asked(tmp_path):
    root, twin = store_with_twin(tmp_path)
    store = TaskStore(root)
    assert list(store.tasks) == [DEMO_TASK_ID] and list(store.twins) == [twin]
    assert {store.pick(None, seed, "train").id for seed in range(50)} == {DEMO_TASK_ID}
    assert {store.pick(None, seed, "train", twin_rate=1.0).id for seed in range(50)} == {twin}
    mixed = [store.pick(None, seed, "train", twin_rate=0.3).id for seed in range(400)]
    assert 0.2 < mixed.count(twin) / len(mixed) < 0.4
    assert store.get(twin).twin_of == DEMO_TASK_ID and store.get(DEMO_TASK_ID).twin_of is None
    assert [task.id for task in store.pool_keys()[store.get(twin).pool_key]] == sorted([DEMO_TASK_ID, twin])


def test_a_store_without_twins_reads_as_before(tmp_path):
    root, twin = store_with_twin(tmp_path)
    (root / TWINS).unlink()
    shutil.rmtree(hidden_dir(root, twin))
    assert TaskStore(root).twins == {}
