"""Every mutant of a unit runs in one command, a forked child each: nothing a child does reaches the next one, a child
that blocks past every alarm is killed without stopping the rest, and the workspace is never written (the sandbox's
user may not write it; before, every mutant then "killed" every check). No Docker: `python` commands run here."""

import json
import random
from pathlib import Path
from unittest.mock import patch

from proto.tasks import IoCheck
from task_synth.candidates.deletion import Deletion
from task_synth.candidates.units import Unit
from task_synth.settings import SynthSettings
from task_synth.validation import io_recording
from task_synth.validation.call_runs import MUTANTS_JSON, probed, replayed, run_calls
from task_synth.validation.io_recording import _mutant_kills, _probed_toward_unreached
from task_synth.validation.mutants import Mutant
from task_synth.validation.recorded_calls import Call, parsed_call
from task_synth.validation.task_strength import measured_strength
from task_synth.validation.unit_checks import UNREACHED
from task_synth.validation.unseen_calls import perturbed_calls
from tests.task_synth.recorder_runs import LocalSandbox

ORIGINAL = "CALLS = []\n\n\ndef bump(x):\n    CALLS.append(x)\n    return len(CALLS)\n"
TIMES_TEN = ORIGINAL.replace("return len(CALLS)", "return 10 * len(CALLS)")
# Deaf to the alarm that limits each call, and never returns: only the parent's kill ends it.
DEAF = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n\n\ndef bump(x):\n    while True:\n        pass\n"


def _results(found) -> list[str | None]:
    return [call.check.result if call is not None else None for call in found]


def test_each_mutant_starts_from_a_fresh_import_and_a_killed_one_stops_nothing(tmp_path: Path):
    target = tmp_path / "counter.py"
    target.write_text(ORIGINAL)
    sb = LocalSandbox(tmp_path)
    sources = [ORIGINAL, TIMES_TEN, ORIGINAL, DEAF, ORIGINAL]
    written = target.stat().st_mtime_ns
    sb.write_file(
        MUTANTS_JSON,
        json.dumps({"mutants": [{"module": "counter", "path": str(target), "source": text} for text in sources]}),
    )
    checks = [IoCheck(module="counter", qualname="bump", args=f"({n},)") for n in (1, 2)]
    outcomes = run_calls(sb, checks, "0", call_s=1.0, budget_s=1.0, mutants=len(sources))
    # The module's list starts empty in every child: the third mutant does not see the first two's calls.
    assert [_results(found) for found in outcomes] == [
        ["1", "2"],
        ["10", "20"],
        ["1", "2"],
        [None, None],
        ["1", "2"],
    ]
    assert target.read_text() == ORIGINAL and target.stat().st_mtime_ns == written


def test_without_mutants_the_calls_run_once_against_the_file_as_it_is(tmp_path: Path):
    (tmp_path / "counter.py").write_text(TIMES_TEN)
    checks = [IoCheck(module="counter", qualname="bump", args="(7,)")]
    assert [_results(found) for found in run_calls(LocalSandbox(tmp_path), checks, "0", 1.0, 5.0)] == [["10"]]


def test_every_mutant_is_judged_when_their_outcomes_pass_what_an_exec_keeps_of_its_output(tmp_path: Path):
    """BoundedStack's 24 mutants printed past the 64 KiB an exec keeps: from the tenth on, none had an outcome, so
    each seemed to change every call (kill rate 1.0, no equivalent mutant, whatever the checks)."""
    target = tmp_path / "counter.py"
    target.write_text(ORIGINAL)
    sb = LocalSandbox(tmp_path)
    sources = [ORIGINAL] * 40
    sb.write_file(
        MUTANTS_JSON,
        json.dumps({"mutants": [{"module": "counter", "path": str(target), "source": text} for text in sources]}),
    )
    checks = [IoCheck(module="counter", qualname="bump", args=f"({'x' * 40!r},)") for _ in range(30)]
    outcomes = run_calls(sb, checks, "0", call_s=1.0, budget_s=10.0, mutants=len(sources))
    assert [sum(found is not None for found in mutant) for mutant in outcomes] == [30] * 40


def test_a_groups_mutants_of_two_modules_run_in_one_command(tmp_path: Path):
    """Each mutant stands in for its own module only: a mutant of `counter` leaves `doubler` as it is, and the other
    way round."""
    (tmp_path / "counter.py").write_text(ORIGINAL)
    (tmp_path / "doubler.py").write_text("def twice(x):\n    return 2 * x\n")
    sb = LocalSandbox(tmp_path)
    mutants = [
        {"module": "counter", "path": str(tmp_path / "counter.py"), "source": TIMES_TEN},
        {"module": "doubler", "path": str(tmp_path / "doubler.py"), "source": "def twice(x):\n    return 3 * x\n"},
    ]
    sb.write_file(MUTANTS_JSON, json.dumps({"mutants": mutants}))
    checks = [
        IoCheck(module="counter", qualname="bump", args="(1,)"),
        IoCheck(module="doubler", qualname="twice", args="(1,)"),
    ]
    outcomes = run_calls(sb, checks, "0", call_s=1.0, budget_s=5.0, mutants=len(mutants))
    assert [_results(found) for found in outcomes] == [["10", "2"], ["1", "3"]]


# Imports for longer than a call may last (inflect's typeguard-checked package took 1.7 s).
SLOW_IMPORT = "import time\n\ntime.sleep(0.8)\n" + ORIGINAL  # longer than a call's limit below


def test_a_package_slower_to_import_than_a_calls_limit_still_gives_outcomes_and_its_mutants_are_told_apart(
    tmp_path: Path,
):
    target = tmp_path / "counter.py"
    target.write_text(SLOW_IMPORT)
    sb = LocalSandbox(tmp_path)
    checks = [IoCheck(module="counter", qualname="bump", args=f"({n},)") for n in (1, 2)]
    assert [_results(found) for found in run_calls(sb, checks, "0", call_s=0.5, budget_s=5.0)] == [["1", "2"]]
    sources = [SLOW_IMPORT, SLOW_IMPORT.replace("return len(CALLS)", "return 10 * len(CALLS)")]
    sb.write_file(
        MUTANTS_JSON,
        json.dumps({"mutants": [{"module": "counter", "path": str(target), "source": text} for text in sources]}),
    )
    outcomes = run_calls(sb, checks, "0", call_s=0.5, budget_s=5.0, mutants=len(sources))
    assert [_results(found) for found in outcomes] == [["1", "2"], ["10", "20"]]


# A package whose import is slow and counted, a function reached through an alias and a from-import elsewhere, and
# a default argument (code that runs at import).
PACKAGE = {
    "pkg/__init__.py": "import os\n\nwith open(os.environ['IMPORTS'], 'a') as f:\n    f.write('x')\n",
    "pkg/core.py": (
        "import functools\n\n\ndef bump(x, step=1):\n    total = x + step\n    return total\n\n\n"
        "increment = bump\n\n\n@functools.lru_cache(maxsize=None)\ndef grow(x):\n    return x * 2\n"
    ),
    "pkg/api.py": "from pkg.core import bump\n\n\ndef twice(x):\n    return bump(bump(x))\n",
}


def _package_outcomes(tmp_path: Path, monkeypatch, sources: list[str], checks: list[IoCheck]):
    for path, text in PACKAGE.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    imports = tmp_path / "imports.txt"
    monkeypatch.setenv("IMPORTS", str(imports))
    sb = LocalSandbox(tmp_path)
    core = str(tmp_path / "pkg/core.py")
    sb.write_file(
        MUTANTS_JSON,
        json.dumps({"mutants": [{"module": "pkg.core", "path": core, "source": text} for text in sources]}),
    )
    outcomes = run_calls(sb, checks, "0", call_s=0.5, budget_s=5.0, mutants=len(sources))
    return [_results(found) for found in outcomes], imports.read_text()


def test_mutants_of_function_bodies_are_patched_into_one_import_and_reach_every_reference(tmp_path, monkeypatch):
    """Before, every mutant's child imported the package afresh (inflect: 1.7 s each); now the package is imported
    once and each child patches the mutant's code into the functions it changes, which every alias, from-import and
    decorator's wrapper then runs."""
    core = PACKAGE["pkg/core.py"]
    sources = [core.replace("x + step", "x - step"), core.replace("x * 2", "x * 3"), core]
    checks = [
        IoCheck(module="pkg.core", qualname="increment", args="(5,)"),
        IoCheck(module="pkg.api", qualname="twice", args="(5,)"),
        IoCheck(module="pkg.core", qualname="grow", args="(5,)"),
    ]
    results, imports = _package_outcomes(tmp_path, monkeypatch, sources, checks)
    assert results == [["4", "3", "10"], ["6", "7", "15"], ["6", "7", "10"]]
    assert imports == "x"  # once, in the parent: no child imported the package again


def test_a_mutant_of_code_that_runs_at_import_is_imported_afresh(tmp_path, monkeypatch):
    core = PACKAGE["pkg/core.py"]
    sources = [core.replace("step=1", "step=2"), core.replace("x + step", "x - step")]
    checks = [IoCheck(module="pkg.api", qualname="twice", args="(5,)")]
    results, imports = _package_outcomes(tmp_path, monkeypatch, sources, checks)
    assert results == [["9"], ["3"]]
    assert imports == "xx"  # the parent's, and the default's mutant's own: a default is evaluated at import


def _call(args: str, result: str) -> Call:
    check = IoCheck(module="branchy", qualname="sign", args=args)
    raw = {**check.model_dump(), "result": result, "raises": None, "state": None, "args_after": None}
    found = parsed_call(raw, {"branchy": ["sign"]})
    assert found is not None
    return found


BRANCHY = "def sign(x):\n    if x >= 0:\n        return 1\n    return -1 if x < -100 else -2\n"


def test_the_replay_reports_the_lines_its_reproduced_calls_ran(tmp_path: Path):
    """Only the calls that reproduce count: a call whose recorded outcome the replay does not give adds no line."""
    target = tmp_path / "branchy.py"
    target.write_text(BRANCHY)
    recorded = [_call("(5,)", "1"), _call("(-5,)", "-1"), _call("(-500,)", "-1")]  # (-5,) gives -2 in truth
    replay = replayed(LocalSandbox(tmp_path), recorded, [str(target)])
    assert [(call.check.args, lines) for call, lines in replay] == [
        ("(5,)", {str(target): {2, 3}}),
        ("(-500,)", {str(target): {2, 4}}),
    ]


def test_a_mutant_on_a_line_no_call_runs_survives_and_one_that_calls_run_unchanged_is_equivalent(tmp_path: Path):
    """The toolz survivors that earned 1.0 sat in branches no call ran; they counted as equivalent, outside the rate."""
    target = tmp_path / "branchy.py"
    target.write_text(BRANCHY)
    unit = Unit("branchy.py", "sign", "function", 1, 4, ((2, 4),), 3, 2)
    deletion = Deletion(unit, "stub", {"branchy.py": "def sign(x):\n    raise NotImplementedError\n"}, {})
    sb = LocalSandbox(tmp_path)
    call = _call("(5,)", "1")
    mutants = [  # the mutants of `sign` that mutants_of makes, by line: 2 is run, 4 is not
        Mutant("comparison", 2, BRANCHY.replace(">= 0", "> 0")),  # equivalent on x=5
        Mutant("constant", 4, BRANCHY.replace("-2", "-3")),
    ]
    deletion.original["branchy.py"] = BRANCHY
    reached = {"/workspace/branchy.py": {2, 3}}
    with patch("task_synth.validation.io_recording.mutants_of", lambda *_args: mutants):
        kills = _mutant_kills(sb, deletion, [call], SynthSettings(), {"branchy.py": "branchy"}, reached)
    assert kills == [("branchy.py::sign", set()), ("branchy.py::sign", {UNREACHED})]
    strength = measured_strength([killed for _, killed in kills], [call.key], 0.0)
    assert (strength.equivalent, strength.killed, strength.kill_rate) == (1, 0, 0.0)


FAR = "def sign(x):\n    if x < -1:\n        return x * 2\n    return 0\n"


def test_a_line_two_steps_from_every_visible_call_is_reached_by_a_second_round_of_probes(tmp_path: Path, monkeypatch):
    """The visible call is sign(1); one step away lie 2, 0, 3, -1: none runs line 3. The second round perturbs the
    first round's calls, and sign(-2) runs it."""
    (tmp_path / "far.py").write_text(FAR)
    monkeypatch.setattr(io_recording, "WORKSPACE", str(tmp_path))  # the module runs from here, not /workspace
    where = str(tmp_path / "far.py")
    unit = Unit("far.py", "sign", "function", 1, 4, ((2, 4),), 3, 2)
    deletion = Deletion(unit, "stub", {"far.py": "def sign(x):\n    raise NotImplementedError\n"}, {"far.py": FAR})
    sb = LocalSandbox(tmp_path)
    raw = {**IoCheck(module="far", qualname="sign", args="(1,)", test="t.py::t").model_dump()}
    visible = parsed_call(
        {**raw, "result": "'near'", "raises": None, "state": None, "args_after": None}, {"far": ["sign"]}
    )
    assert visible is not None
    rng = random.Random(0)
    first = perturbed_calls([visible], {("far", "sign"): [((1,), {})]}, rng)
    replay = replayed(sb, [visible, *probed(sb, first, set(), 5.0)], [where])
    assert len(replay) > 1 and all(3 not in lines.get(where, ()) for _, lines in replay)
    more = _probed_toward_unreached(sb, deletion, replay, {("far", "sign"): [((1,), {})]}, first, set(), rng, 1)
    assert any(3 in lines.get(where, ()) for _, lines in more)
    assert all(call.check.test is None and call.check.args != "(1,)" for call, _ in more)
