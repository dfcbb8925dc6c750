"""Out-of-process checks without an engine: what goes into a container, how the server judges what comes back, and
the launcher and its children run on this host in a PID namespace of their own (as root, like CI)."""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from env_server.grading.checks import agrees, check_inputs, judge, judge_all
from env_server.grading.run import PROGRAMS
from proto.call_replay import drawn, program_step
from proto.tasks import IoCheck
from task_synth.validation.inside.argument_recipes import recipe_texts
from tests.task_fixture import ORIGINAL_OPS, WRONG_OPS

CHECKS = [
    IoCheck(module="calc.ops", qualname="clamp", args="(-5, 0, 10)", result="0", test="tests/t.py::test_below"),
    IoCheck(module="calc.ops", qualname="clamp", args="(1, 5, 0)", raises="ValueError"),
    IoCheck(module="calc.ops", qualname="clamp", args="(0.5, 0.0, 1.0)", result="0.5"),
]


def test_a_container_is_told_the_calls_and_never_their_outcomes():
    sent = json.dumps(check_inputs(CHECKS))
    assert "(-5, 0, 10)" in sent and "ValueError" not in sent
    assert not {"result", "raises", "state", "args_after"} & {key for call in check_inputs(CHECKS) for key in call}


@pytest.mark.parametrize(
    ("expected", "got", "same"),
    [
        (0.1 + 0.2, 0.3, True),
        (1, 1.0, True),
        (1, True, True),
        ([1, 2], (1, 2), False),
        ({"a": [0.5]}, {"a": [0.5 + 1e-15]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("x", b"x", False),
        ({1, 2}, {2, 1}, True),
        (None, 0, False),
    ],
)
def test_values_agree_as_equality_says_with_floats_approximately(expected, got, same):
    assert agrees(expected, got) is same


def test_a_check_passes_only_on_the_originals_outcome():
    returned, raised, floats = CHECKS
    assert judge(returned, {"i": 0, "returned": "0"}).outcome == "passed"
    assert judge(returned, {"i": 0, "returned": "-5"}).outcome == "failed"
    assert judge(returned, {"i": 0, "returned": None, "kind": "AlwaysEqual"}).outcome == "failed"
    assert judge(returned, {"i": 0, "raised": "ValueError"}).outcome == "failed"
    assert judge(returned, {"i": 0, "timeout": True}).outcome == "failed"
    assert judge(returned, None).outcome == "missing"
    assert judge(raised, {"i": 1, "raised": "ValueError"}).outcome == "passed"
    assert judge(raised, {"i": 1, "raised": "TypeError"}).outcome == "failed"
    assert judge(raised, {"i": 1, "returned": "5"}).outcome == "failed"
    assert judge(floats, {"i": 2, "returned": "0.5000000000000001"}).outcome == "passed"
    assert judge(floats, {"i": 2, "returned": "__import__('os')"}).outcome == "failed"  # never evaluated as code


def test_a_method_check_also_needs_the_receivers_state_after_the_call():
    method = IoCheck(module="m", qualname="Box.put", args="(3,)", result="None", inputs="eA==", state="{'n': 3}")
    assert judge(method, {"i": 0, "returned": "None", "state": "{'n': 3}"}).outcome == "passed"
    assert judge(method, {"i": 0, "returned": "None", "state": "{'n': 0}"}).outcome == "failed"
    assert judge(method, {"i": 0, "returned": "None"}).outcome == "failed"
    assert judge(method, {"i": 0, "returned": "None", "state": "{'n': 3, 'cache': {}}"}).outcome == "passed"


def frame(index: int, *records: dict) -> dict:
    """What the check child sends for one call: the lines the call's own channel carried."""
    return {"i": index, "channel": [json.dumps(record) for record in records]}


def test_each_call_counts_only_the_one_record_its_own_channel_carried():
    frames = [frame(0, {"i": 0, "returned": "0"}), frame(9, {"i": 9, "returned": "0"}), {"i": "0"}, frame(2)]
    judged = judge_all(CHECKS, frames)
    assert [v.outcome for v in judged.results] == ["passed", "missing", "missing"] and judged.forged == []
    assert [v.unseen for v in judged.results] == [False, True, True]


def test_a_record_written_before_the_replay_makes_the_call_forged_not_first():
    """Code of the submission that runs as the check child imports it can write a frame for every call with the
    visible table's answer before the replays run: a second frame for a call is a forged grading, not 'first wins'."""
    early = [frame(0, {"i": 0, "returned": "0"}), frame(1, {"i": 1, "raised": "ValueError"})]
    honest = [frame(0, {"i": 0, "returned": "-5"}), frame(1, {"i": 1, "returned": "5"})]
    judged = judge_all(CHECKS, [*early, *honest])
    assert judged.forged == [0, 1]


def test_a_channel_that_carried_two_records_or_another_calls_is_forged():
    two = judge_all(CHECKS, [frame(0, {"i": 0, "returned": "0"}, {"i": 0, "returned": "0"})])
    other = judge_all(CHECKS, [frame(0, {"i": 1, "returned": "0"})])
    garbled = judge_all(CHECKS, [{"i": 0, "channel": ["not json"]}])
    assert two.forged == [0] and other.forged == [0] and garbled.forged == [0]
    assert judge_all(CHECKS, [{"i": 0, "channel": [], "timeout": True}]).results[0].got == "ran out of time"


def test_an_exception_that_subclasses_the_originals_agrees_as_callers_see_it():
    """`pytest.raises(ValueError)` and `except ValueError` accept a subclass; the check does too, and only that."""
    _, raised, _ = CHECKS
    subclass = {"i": 1, "raised": "RangeError", "bases": ["ValueError", "Exception", "BaseException", "object"]}
    assert judge(raised, subclass).outcome == "passed"
    assert judge(raised, {"i": 1, "raised": "ValueError", "bases": ["Exception"]}).outcome == "passed"
    assert judge(raised, {"i": 1, "raised": "KeyError", "bases": ["LookupError", "Exception"]}).outcome == "failed"
    assert judge(raised, {"i": 1, "raised": "RangeError", "bases": "ValueError"}).outcome == "failed"


class RangeError(ValueError):
    pass


def _generator_ending_in(error):
    yield 1
    raise error


class Shelf:
    def take(self, name):
        raise RangeError(name)


def test_a_generator_or_a_class_step_that_raises_a_subclass_of_the_originals_class_agrees_and_no_other_does():
    """The replay sends the bases of every class that ended a generator or a program's step; the judge accepts a
    class below the original's, as `pytest.raises` would, and nothing else."""
    generator = IoCheck(
        module="m", qualname="g", args="()", result="('generated', (1, ), ('raised', 'ValueError'))", take=2
    )
    raised: dict = {}
    drawn_text = drawn(_generator_ending_in(RangeError()), 2, raised)
    record = {"i": 0, "returned": drawn_text, "bases_of": raised}
    assert raised["RangeError"][0] == "ValueError" and judge(generator, record).outcome == "passed"
    assert judge(generator, {**record, "bases_of": {}}).outcome == "failed"
    other = drawn(_generator_ending_in(KeyError()), 2, raised)
    assert judge(generator, {"i": 0, "returned": other, "bases_of": raised}).outcome == "failed"
    program = IoCheck(
        module="m", qualname="Shelf", args="()", steps="(('new', (), {}, ()), ('call', 0, 'take', ('a',), {}, ()))",
        result="(('returned', None), ('raised', 'ValueError'))", state="()",
    )  # fmt: skip
    steps = [("new", (), {}, ()), ("call", 0, "take", ("a",), {}, ())]
    objects, outcomes, raised = [], [], {}
    for step in steps:
        result, outcome = program_step(Shelf, step, objects, (Shelf, ()), raised)
        objects.append(result)
        outcomes.append(outcome)
    record = {"i": 0, "returned": "(" + "".join(f"{o}, " for o in outcomes) + ")", "state": "()", "bases_of": raised}
    assert judge(program, record).outcome == "passed"
    assert judge(program, {**record, "bases_of": {"RangeError": ["LookupError"]}}).outcome == "failed"


# --- the programs that run inside a grading container, run here ------------------------------------------------------


def _namespaced() -> bool:
    probe = subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_namespace = pytest.mark.skipif(
    shutil.which("unshare") is None or not _namespaced(),
    reason="running the launcher here needs `unshare -pf` (root); the Docker grading tests cover it otherwise",
)


def launch_here(
    tmp_path: Path, ops: str, kind: str, config: dict, tests: str = "", extra: dict[str, str] | None = None
) -> tuple[str, dict, Path]:
    """Run the launcher on a workspace holding `ops` as calc/ops.py; (its stdout, its report, the nonce file)."""
    grader, workspace = tmp_path / "grader", tmp_path / "workspace"
    grader.mkdir(parents=True)
    for name, source in PROGRAMS.items():
        shutil.copy(source, grader / name)
    (workspace / "calc").mkdir(parents=True)
    (workspace / "calc" / "__init__.py").write_text("")
    (workspace / "calc" / "ops.py").write_text(ops)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_ops.py").write_text(tests)
    for path, text in (extra or {}).items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text)
    config = {**config, "kind": kind, "cwd": str(workspace), "timeout_s": 20, "log": str(tmp_path / "child.log")}
    (grader / "run.json").write_text(json.dumps(config))
    (grader / "nonce").write_text("n0nce")
    ran = subprocess.run(
        ["unshare", "-pf", "--mount-proc", sys.executable, "-P", str(grader / "launcher.py")]
        + [str(grader / "run.json"), str(grader / "nonce"), str(grader / "report")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(workspace)},
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout, json.loads((grader / "report").read_text()), grader / "nonce"


@needs_namespace
def test_the_launcher_signs_its_report_and_empties_the_nonce_before_the_child_runs(tmp_path):
    config = {"calls": check_inputs(CHECKS), "call_timeout_s": 5}
    stdout, report, nonce = launch_here(tmp_path, ORIGINAL_OPS, "checks", config)
    signed = [line for line in stdout.splitlines() if line.startswith("n0nce ")]
    assert len(signed) == 1
    digest = hashlib.sha256((tmp_path / "grader" / "report").read_bytes()).hexdigest()
    assert signed[0] == f"n0nce {digest}" and nonce.read_text() == ""
    assert report["child_exit"] == 0 and not report["timed_out"]


@needs_namespace
def test_checks_run_in_the_container_and_are_judged_outside_it(tmp_path):
    config = {"calls": check_inputs(CHECKS), "call_timeout_s": 5}
    _, right, _ = launch_here(tmp_path / "right", ORIGINAL_OPS, "checks", config)
    _, wrong, _ = launch_here(tmp_path / "wrong", WRONG_OPS, "checks", config)
    assert [v.outcome for v in judge_all(CHECKS, [json.loads(line) for line in right["lines"]]).results] == [
        "passed"
    ] * 3
    # `return value` is right where the value lies in range
    assert [v.outcome for v in judge_all(CHECKS, [json.loads(line) for line in wrong["lines"]]).results] == [
        "failed",
        "failed",
        "passed",
    ]


@needs_namespace
def test_a_call_that_never_returns_fails_its_check_and_the_rest_still_run(tmp_path):
    looping = ORIGINAL_OPS.replace('    """Return value limited', '    while value == 7:\n        pass\n    """Return')
    calls = check_inputs([IoCheck(module="calc.ops", qualname="clamp", args="(7, 0, 10)", result="7"), CHECKS[0]])
    _, report, _ = launch_here(tmp_path, looping, "checks", {"calls": calls, "call_timeout_s": 1})
    judged = judge_all(CHECKS[:1] * 2, [json.loads(line) for line in report["lines"]])
    assert [v.got for v in judged.results] == ["ran out of time", "returned 0"] and judged.forged == []


APPLY_OPS = "def apply(function, values):\n    return [function(value) for value in values]\n"


@needs_namespace
def test_a_check_whose_arguments_are_recipes_is_built_and_run_in_the_check_child(tmp_path):
    """A function by value and a range travel as recipes: the check child builds them anew and calls the unit."""
    scale = 3
    args, kwargs = recipe_texts((lambda value: value * scale, range(2, 5)), {}, set())
    check = IoCheck(module="calc.ops", qualname="apply", args=args, kwargs=kwargs, result="[6, 9, 12]", recipes=True)
    config = {"calls": check_inputs([check]), "call_timeout_s": 5}
    _, right, _ = launch_here(tmp_path / "right", APPLY_OPS, "checks", config)
    _, wrong, _ = launch_here(tmp_path / "wrong", APPLY_OPS.replace("function(value)", "value"), "checks", config)
    assert [v.outcome for v in judge_all([check], [json.loads(line) for line in right["lines"]]).results] == ["passed"]
    assert [v.got for v in judge_all([check], [json.loads(line) for line in wrong["lines"]]).results] == [
        "returned [2, 3, 4]"
    ]


ASYNC_OPS = "import asyncio\n\n\nasync def total(values):\n    await asyncio.sleep(0)\n    return sum(values)\n"


@needs_namespace
def test_an_async_units_check_awaits_the_call_in_the_check_child(tmp_path):
    """Its outcome is what awaiting the call gives; before, an async function had no check at all."""
    check = IoCheck(module="calc.ops", qualname="total", args="([1, 2, 3],)", result="6")
    config = {"calls": check_inputs([check]), "call_timeout_s": 5}
    _, right, _ = launch_here(tmp_path / "right", ASYNC_OPS, "checks", config)
    _, wrong, _ = launch_here(tmp_path / "wrong", ASYNC_OPS.replace("sum(values)", "max(values)"), "checks", config)
    assert [v.outcome for v in judge_all([check], [json.loads(line) for line in right["lines"]]).results] == ["passed"]
    assert [v.got for v in judge_all([check], [json.loads(line) for line in wrong["lines"]]).results] == ["returned 3"]


@needs_namespace
def test_the_test_child_reports_each_wanted_test_and_a_daemon_holding_its_pipe_does_not_hold_the_run(tmp_path):
    tests = (
        "import subprocess, sys\nfrom calc.ops import clamp\n\n\n"
        "def test_below():\n    assert clamp(-5, 0, 10) == 0\n\n\n"
        "def test_above():\n    assert clamp(50, 0, 10) == 10\n\n\n"
        "def test_starts_a_daemon():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
    )
    wanted = [f"tests/test_ops.py::{name}" for name in ("test_below", "test_above", "test_starts_a_daemon")]
    config = {"arguments": ["-q", "-p", "no:cacheprovider", "tests/test_ops.py"], "wanted": wanted}
    _, report, _ = launch_here(tmp_path, WRONG_OPS, "tests", config, tests)
    records = [json.loads(line) for line in report["lines"]]
    outcomes = {r["nodeid"]: r["outcome"] for r in records if r.get("nodeid") and r["outcome"] != "passed"}
    assert outcomes == {wanted[0]: "failed", wanted[1]: "failed"}
    assert {"exit_code": 1} in records and report["timed_out"] is False


READER = """
class Buffer:
    def __init__(self, data):
        self.data = bytearray(data)


class Token:
    def __init__(self, text):
        self.text = text


def take(buf, n):
    out = bytes(buf.data[:n])
    del buf.data[:n]
    return Token(out)
"""


@needs_namespace
def test_a_check_on_objects_needs_the_described_result_and_the_arguments_left_as_the_original_left_them(
    tmp_path, monkeypatch
):
    (tmp_path / "pickling" / "wire").mkdir(parents=True)
    (tmp_path / "pickling" / "wire" / "__init__.py").write_text("")
    (tmp_path / "pickling" / "wire" / "reader.py").write_text(READER)
    monkeypatch.syspath_prepend(str(tmp_path / "pickling"))
    from wire.reader import Buffer  # type: ignore[import-not-found]

    inputs = base64.b64encode(pickle.dumps((None, ((Buffer(b"hello"), 2), {})))).decode()
    consumed = ((("object", "Buffer", {"data": ("bytearray", b"llo")}), 2), {})
    check = IoCheck(
        module="wire.reader",
        qualname="take",
        args="()",
        inputs=inputs,
        result=repr(("object", "Token", {"text": b"he"})),
        args_after=repr(consumed),
    )
    config = {"calls": check_inputs([check]), "call_timeout_s": 5}
    files = {"wire/__init__.py": ""}
    _, right, _ = launch_here(
        tmp_path / "right", ORIGINAL_OPS, "checks", config, extra={**files, "wire/reader.py": READER}
    )
    peeking = READER.replace("    del buf.data[:n]\n", "")  # the right token, but the buffer is not consumed
    _, wrong, _ = launch_here(
        tmp_path / "wrong", ORIGINAL_OPS, "checks", config, extra={**files, "wire/reader.py": peeking}
    )
    assert [v.outcome for v in judge_all([check], [json.loads(line) for line in right["lines"]]).results] == ["passed"]
    verdict = judge_all([check], [json.loads(line) for line in wrong["lines"]]).results[0]
    assert verdict.outcome == "failed" and "left its arguments" in verdict.got
    for name in [name for name in sys.modules if name == "wire" or name.startswith("wire.")]:
        del sys.modules[name]


# A stub whose module, on import in the check child, writes the visible table's answer for every call on the
# inherited channel, then lets the replays run as they would.
EARLY_RECORDS = (
    WRONG_OPS
    + """
import json as _json, os as _os, sys as _sys

if _sys.argv[0].endswith("check_child.py"):
    _answers = {0: {"returned": "0"}, 1: {"raised": "ValueError"}, 2: {"returned": "0.5"}}
    for _i, _answer in _answers.items():
        _frame = {"i": _i, "channel": [_json.dumps({"i": _i, **_answer})]}
        _os.write(int(_sys.argv[2]), (_json.dumps(_frame) + "\\n").encode())
"""
)


@needs_namespace
def test_records_a_stub_writes_as_the_check_child_imports_it_forge_the_grading(tmp_path):
    config = {"calls": check_inputs(CHECKS), "call_timeout_s": 5}
    _, report, _ = launch_here(tmp_path, EARLY_RECORDS, "checks", config)
    judged = judge_all(CHECKS, [json.loads(line) for line in report["lines"]])
    assert judged.forged == [0, 1, 2]


# A stub that, run under pytest, reports every wanted test as passed on the test child's pipe and leaves the run.
REPORT_AND_LEAVE = (
    WRONG_OPS
    + """
import json as _json, os as _os, sys as _sys

if _sys.argv[0].endswith("pytest_child.py"):
    _config = _json.load(open(_sys.argv[1]))
    for _nodeid in _config["wanted"]:
        _os.write(int(_sys.argv[2]), (_json.dumps({"nodeid": _nodeid, "outcome": "passed"}) + "\\n").encode())
    _os._exit(0)
"""
)


@needs_namespace
def test_a_test_run_that_reports_and_leaves_before_its_end_has_no_report_that_counts(tmp_path):
    from env_server.grading.verdict import RunReport

    tests = "from calc.ops import clamp\n\n\ndef test_below():\n    assert clamp(-5, 0, 10) == 0\n"
    config = {
        "arguments": ["-q", "-p", "no:cacheprovider", "tests/test_ops.py"],
        "wanted": ["tests/test_ops.py::test_below"],
    }
    _, report, _ = launch_here(tmp_path, REPORT_AND_LEAVE, "tests", config, tests)
    records = [json.loads(line) for line in report["lines"]]
    assert {"nodeid": "tests/test_ops.py::test_below", "outcome": "passed"} in records  # the forgery was sent
    run = RunReport.of(records, None, report["child_exit"])
    assert run.error is not None and "no end-of-run record" in run.error
