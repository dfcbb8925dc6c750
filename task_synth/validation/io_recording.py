"""Input/output checks of the deleted unit (functions, methods, or a class's programs), recorded in the oracle sandbox
for the grader to replay as hidden checks.

The F2P tests run with the solution applied and the recorder plugin loaded (inside/io_recorder_plugin.py),
twice, under two hash seeds; the second time only the tests that made candidate calls run. Each recorded call is linked
to the first F2P test, by node id, that made it. Unseen calls, which no visible test makes, change one argument of a
recorded call a little and take their expected outcome from running them where the solution is applied. A call becomes a
check when a fresh interpreter under another hash seed reproduces its outcome, so that a check depends neither on hash
order nor on state a test set up.
"""

from __future__ import annotations

import ast
import itertools
import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from proto.call_values import SHIPPED_NAME
from proto.python_ast import parse_python
from proto.tasks import IoCheck
from sandbox import FileTooLarge, Sandbox, SandboxFileNotFound
from sandbox.layout import WORKSPACE
from task_synth.candidates.deletion import Deletion
from task_synth.repository.editable_install import SCRATCH
from task_synth.repository.repo_layout import RepoLayout
from task_synth.settings import SynthSettings
from task_synth.validation.inside.io_recorder_plugin import IMPORT_ALLOWANCE_S, MAX_RECORDS
from task_synth.validation.mutants import MAX_MUTANTS, mutants_of
from task_synth.validation.recorded_calls import Call, calls_in_both, linked_calls, parsed_call, raised_in
from task_synth.validation.suite_runs import PLUGIN_DIR
from task_synth.validation.task_strength import Strength
from task_synth.validation.unit_checks import UNREACHED, UnitChecks, UnitKills, chosen_for_units, deleted_units
from task_synth.validation.unseen_calls import (
    MAX_PROBES,
    NOISE_EXCEPTIONS,
    perturbed_calls,
    receiver_pools,
    recorded_arguments,
)

log = logging.getLogger(__name__)
RECORDER = "regrow_io_recorder"
RECORDER_SOURCE = Path(__file__).with_name("inside") / "io_recorder_plugin.py"
PROGRAMS = "regrow_program_recorder"
PROGRAMS_SOURCE = Path(__file__).with_name("inside") / "program_recorder.py"
VALUES_SOURCE = Path(__file__).parents[2] / "proto" / "call_values.py"
POOL = "regrow_receiver_pool"
POOL_SOURCE = Path(__file__).with_name("inside") / "receiver_pool.py"
REACH = "regrow_line_reach"
REACH_SOURCE = Path(__file__).with_name("inside") / "line_reach.py"
RECIPES = "regrow_argument_recipes"
RECIPES_SOURCE = Path(__file__).with_name("inside") / "argument_recipes.py"
# The recorder and the modules it imports, by their names beside it in the sandbox.
RECORDER_FILES = {
    f"{RECORDER}.py": RECORDER_SOURCE,
    f"{SHIPPED_NAME}.py": VALUES_SOURCE,
    f"{PROGRAMS}.py": PROGRAMS_SOURCE,
    f"{RECIPES}.py": RECIPES_SOURCE,
    f"{POOL}.py": POOL_SOURCE,
    f"{REACH}.py": REACH_SOURCE,
}
IO_CONFIG = f"{SCRATCH}/io_config.json"
RECORDING_MIN_S, RECORDING_FACTOR = 60.0, 10.0  # a recording run's time limit, from the tests' own time
REACH_OUT = f"{SCRATCH}/io_reach.jsonl"  # a JSON line [index, {path: [line, ...]}] per replayed call
MUTANTS_JSON = f"{SCRATCH}/io_mutants.json"  # {"mutants": [{"module": name, "path": its file, "source": text}]}
HASH_SEEDS = ("1", "2")
REPLAY_HASH_SEED = "3"
MAX_CANDIDATES = 64  # distinct calls of the first run taken on to the second run and the replay
PROBE_CALL_S, PROBE_BUDGET_S = 1.0, 15.0  # a perturbed call may loop forever: each gets a second, all of them 15
MAX_PROBE_SHARES = 4  # a group's perturbed calls and their time grow with its units, up to this many units' worth
REPLAY_CALL_S, REPLAY_BUDGET_S = 10.0, 90.0
MUTANT_BUDGET_S = 20.0  # one mutant's run of every reproduced call
MIN_UNIT_MUTANTS = 10  # mutants of each unit of a group at least, so that each unit's kill rate means something
PLUGIN_MODULES_SOURCE = Path(__file__).with_name("inside") / "pytest_plugin_modules.py"
MAX_READS = 64  # attribute names the visible tests read that show a class's instances


Reached = dict[str, set[int]]  # sandbox path -> the lines of it that reproduced calls ran


@dataclass
class Recording:
    """The checks one task keeps, how many test cases recording them executed, and how strong they are."""

    checks: list[IoCheck]
    test_executions: int
    strength: Strength | None = None
    units: UnitChecks | None = None  # each unit's strength and evidence; None when nothing was recorded


def recorded_functions(deletion: Deletion, modules: Mapping[str, str]) -> dict[str, list[str]]:
    """The deleted functions, methods and classes whose calls (programs, for a class) become checks, as {module:
    [name or Class.method, ...]}; a method of a nested class and a nested class get none. `modules` names the module
    of each path (a group's parts may sit in several)."""
    unit = deletion.unit
    module_name = modules[unit.path]
    if unit.parts:
        named: dict[str, list[str]] = {}
        for piece in unit.parts:
            if piece.qualname.count(".") <= 1:
                named.setdefault(modules[piece.path], []).append(piece.qualname)
        return named
    if unit.kind in ("function", "feature", "class") and "." not in unit.qualname:
        return {module_name: [unit.qualname]}
    if unit.kind == "method" and unit.qualname.count(".") == 1:
        return {module_name: [unit.qualname]}
    if unit.kind == "module":
        tree = parse_python(deletion.original[unit.path])
        body = tree.body if tree else []
        names = [node.name for node in body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
        return {module_name: names} if names else {}
    return {}


def record_io_checks(
    sb: Sandbox,
    deletion: Deletion,
    layout: RepoLayout,
    fail_to_pass: list[str],
    settings: SynthSettings,
    tests_s: float | None = None,
) -> Recording:
    """Checks of the deleted functions from its F2P tests (and any other visible test that shows its calls: a test
    a trivial stand-in passes), in a sandbox whose workspace has the solution applied.

    `tests_s` is how long the F2P and P2P tests took with the solution: a recording run gets a few times that.
    """
    timeout = settings.test_timeout_s
    if tests_s is not None:  # recording wraps every call: pickling a big receiver per call can crawl for minutes
        timeout = min(timeout, max(RECORDING_MIN_S, RECORDING_FACTOR * tests_s))
    functions = recorded_functions(deletion, layout.modules)
    if not functions or not fail_to_pass:
        return Recording([], 0)
    started = time.monotonic()
    for name, source in RECORDER_FILES.items():
        sb.write_file(f"{PLUGIN_DIR}/{name}", source.read_text())
    library_files = sorted(f"/workspace/{path}" for path in layout.modules)
    reads = tests_read(sb, fail_to_pass) if deletion.unit.kind == "class" else []
    config = {"functions": functions, "library_files": library_files, "reads": reads}
    sb.write_file(IO_CONFIG, json.dumps(config))
    first, executions = _recorder_output(sb, HASH_SEEDS[0], fail_to_pass, settings.test_command, timeout)
    laps = [started, time.monotonic()]  # where the recording's time goes, for the log
    linked_all = linked_calls(_parsed_calls(first, functions), fail_to_pass)
    # The library's own calls get room of their own: a test that makes many calls would crowd them out.
    direct = [call for call in linked_all if not call.internal][:MAX_CANDIDATES]
    candidates = direct + [call for call in linked_all if call.internal][: MAX_CANDIDATES // 2]
    if not candidates:
        return Recording([], executions)
    tests = list(dict.fromkeys(call.check.test for call in candidates if call.check.test))
    second, more = _recorder_output(sb, HASH_SEEDS[1], tests, settings.test_command, timeout)
    agreed = calls_in_both(candidates, _parsed_calls(second, functions))
    laps.append(time.monotonic())
    share = min(len(deletion.unit.pieces), MAX_PROBE_SHARES)  # each unit of a group needs unseen calls of its own
    rng = random.Random(f"{settings.seed}:{deletion.mode}:{deletion.unit.key}")
    # Past the recorder's cap a visible call may be missing from both runs, and a probe may repeat it: that check's
    # answer is in the workspace, but a unit earns only when every secret check agrees, so it pays a table nothing.
    recorded, receivers = recorded_arguments([*first, *second]), receiver_pools(first)
    probes = perturbed_calls(agreed, recorded, rng, MAX_PROBES * share, receivers)
    probed = _probed(sb, probes, set().union(*(raised_in(call) for call in agreed)), PROBE_BUDGET_S * share)
    laps.append(time.monotonic())
    unit_files = sorted({f"{WORKSPACE}/{piece.path}" for piece in deletion.unit.pieces})
    reproduced, reached = _reproduced(sb, agreed + probed, unit_files)
    linked = [call for call in reproduced if call.check.test is not None and not call.internal]
    unseen = [
        replace(call, check=call.check.model_copy(update={"test": None}))
        for call in reproduced
        if call.check.test is None or call.internal
    ]
    mutation_started = time.monotonic()
    laps.append(mutation_started)
    kills = _mutant_kills(sb, deletion, reproduced, settings, layout.modules, reached)
    laps.append(time.monotonic())
    # Each unit's checks are chosen to kill its own mutants, then in their own order (spread over tests, new answers).
    units = deleted_units(deletion.unit)
    chosen = chosen_for_units(units, linked, unseen, kills, time.monotonic() - mutation_started)
    checks = chosen.checks
    log.info(
        "%s: %d distinct calls recorded, %d agree under two hash seeds, %d reproduce alone; %d perturbed calls run, "
        "%d give an outcome, %d reproduce; %d checks kept, %d of them unseen (%.1fs: recording runs %s + %s, perturbed "
        "calls %s, replay %s, mutants %s)",
        deletion.unit.key,
        len(candidates),
        len(agreed),
        len(linked),
        len(probes),
        len(probed),
        len(reproduced) - len(linked),
        len(checks),
        sum(check.test is None for check in checks),
        time.monotonic() - started,
        *(f"{later - earlier:.1f}" for earlier, later in itertools.pairwise(laps)),
    )
    strength = chosen.total(round(time.monotonic() - mutation_started, 3))
    return Recording(checks, executions + more, strength, chosen)


def _mutant_kills(
    sb: Sandbox,
    deletion: Deletion,
    calls: list[Call],
    settings: SynthSettings,
    modules: Mapping[str, str],
    reached: Reached,
) -> UnitKills | None:
    """For each mutant of the unit, the unit it mutates and the keys of the calls whose outcome it changes (UNREACHED
    when none does and no call runs the mutant's line: nothing vouches for that line); None when the unit gets no
    mutants (a module, a nested function) or there are no calls to run. One command runs them all, a group's too."""
    unit = deletion.unit
    if not calls or unit.kind not in ("function", "feature", "method", "class", "group"):
        return None
    rng = random.Random(f"{settings.seed}:mutants:{unit.key}")
    # Each unit is measured on its own mutants: a group's parts share one unit's budget, but never below a few each.
    share = max(MIN_UNIT_MUTANTS, -(-MAX_MUTANTS // len(unit.pieces)))
    made = [
        (f"{piece.path}::{piece.qualname}", {"module": modules[piece.path], "path": f"{WORKSPACE}/{piece.path}"}, m)
        for piece in unit.pieces
        if (original := deletion.original.get(piece.path)) is not None
        for m in mutants_of(original, piece.qualname, rng, share)
    ]
    if not made:
        return None
    mutants = [{**where, "source": mutant.source} for _, where, mutant in made]
    sb.write_file(MUTANTS_JSON, json.dumps({"mutants": mutants}))
    outcomes = _run_calls(
        sb, [c.check for c in calls], REPLAY_HASH_SEED, PROBE_CALL_S, MUTANT_BUDGET_S, mutants=len(mutants)
    )
    kills = []
    for (owner, where, mutant), found in zip(made, outcomes, strict=True):
        killed = {call.key for call, again in zip(calls, found, strict=True) if _told_apart(call, again)}
        if not killed and mutant.line not in reached.get(where["path"], ()):
            killed = {UNREACHED}
        kills.append((owner, killed))
    return kills


def _told_apart(call: Call, again: Call | None) -> bool:
    return again is None or again.outcome != call.outcome


def _recorder_output(
    sb: Sandbox, seed: str, tests: list[str], test_command: str, timeout: float
) -> tuple[list[object], int]:
    """What one recording run of `tests` wrote (the recorder's JSON list, empty when it left none), and how many test
    cases it ran."""
    out = f"{SCRATCH}/io_calls_{seed}.json"
    env = {"PYTHONPATH": PLUGIN_DIR, "PYTHONHASHSEED": seed, "REGROW_IO_CONFIG": IO_CONFIG, "REGROW_IO_OUT": out}
    script = f'{test_command} -q -p {RECORDER} "$@"'
    result = sb.exec(["sh", "-c", script, "sh", *tests], timeout=timeout, cwd=WORKSPACE, env=env)
    if result.timed_out:
        log.info("recording calls timed out after %gs; no checks from this run", timeout)
        return [], len(tests)
    try:
        raw = json.loads(sb.read_file(out))
    except (SandboxFileNotFound, FileTooLarge, ValueError) as error:
        log.info("the recording run left no calls (%s): %s", error, (result.stdout + result.stderr)[-500:])
        return [], len(tests)
    return (raw[:MAX_RECORDS] if isinstance(raw, list) else []), len(tests)


def _parsed_calls(raw: list[object], functions: dict[str, list[str]]) -> list[Call]:
    return [call for item in raw if (call := parsed_call(item, functions)) is not None]


def _call_outcomes(sb: Sandbox, checks: list[IoCheck], seed: str, call_s: float, budget_s: float) -> list[Call | None]:
    """Each check's call as run in one fresh interpreter in the sandbox; None for a call that ran out of time, gave
    no literal outcome, changed its arguments, or did not run before the budget was spent."""
    return _run_calls(sb, checks, seed, call_s, budget_s)[0]


def _run_calls(
    sb: Sandbox,
    checks: list[IoCheck],
    seed: str,
    call_s: float,
    budget_s: float,
    mutants: int = 0,
    reach_files: list[str] | None = None,
) -> list[list[Call | None]]:
    """The checks' outcomes as `_call_outcomes` has them: one list, or with `mutants` one list per mutant that
    MUTANTS_JSON holds, all run by one command (a forked child each) instead of one command per mutant. With
    `reach_files`, the lines each call runs in those files go to REACH_OUT."""
    calls = f"{SCRATCH}/io_run_{seed}.json"  # a file: argv holds no more than 128 KiB in one argument
    rows = [[c.module, c.qualname, c.args, c.kwargs, c.inputs, c.steps, c.reads, c.take, c.recipes] for c in checks]
    sb.write_file(calls, json.dumps(rows))
    limits = [str(call_s), str(budget_s)]
    arguments = [*(["--mutants", MUTANTS_JSON] if mutants else []), calls, *limits]
    # Into a file: every mutant's lines together pass the 64 KiB an exec's output keeps, and the rest would be lost.
    out = f"{SCRATCH}/io_outcomes_{seed}.jsonl"
    result = sb.exec(
        ["sh", "-c", f'rm -f {REACH_OUT}; python -m {RECORDER} "$@" > {out}', "sh", *arguments],
        timeout=(budget_s + IMPORT_ALLOWANCE_S + 5) * max(1, mutants) + 30,
        cwd=WORKSPACE,
        env={
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": PLUGIN_DIR,
            "PYTHONDONTWRITEBYTECODE": "1",
            **({"REGROW_REACH_FILES": json.dumps(reach_files), "REGROW_REACH_OUT": REACH_OUT} if reach_files else {}),
        },
    )
    try:
        printed = sb.read_file(out).decode(errors="replace")
    except (SandboxFileNotFound, FileTooLarge) as error:
        log.info("the calls' outcomes could not be read back (%s): %s", error, result.stderr[-500:])
        printed = ""
    found: list[list[Call | None]] = [[None] * len(checks) for _ in range(max(1, mutants))]
    for line in printed.splitlines():
        try:
            fields = json.loads(line)
            mutant = fields.pop(0) if mutants else 0
            index, text, raises, state, after = fields
        except (ValueError, TypeError, AttributeError, IndexError):  # a line the functions wrote to the real stdout
            continue
        if type(index) is int and 0 <= index < len(checks) and type(mutant) is int and 0 <= mutant < len(found):
            raw = {**checks[index].model_dump(), "result": text, "raises": raises, "state": state, "args_after": after}
            found[mutant][index] = parsed_call(raw, {checks[index].module: [checks[index].qualname]})
    if checks and not mutants and not any(found[0]):
        log.info("running %d calls gave no outcome (exit %d): %s", len(checks), result.exit_code, result.stderr[-500:])
    return found


def _probed(sb: Sandbox, probes: list[IoCheck], documented: set[str], budget_s: float) -> list[Call]:
    """The perturbed calls with an outcome a check can expect, which the solution in the sandbox gives them. A
    program's step may raise only what a recorded program raised: an honest rewrite may check its new argument in
    another order."""
    if not probes:
        return []
    found = _call_outcomes(sb, probes, HASH_SEEDS[0], PROBE_CALL_S, budget_s)
    return [
        call
        for call in found
        if call is not None
        and not raised_in(call) & NOISE_EXCEPTIONS
        and (call.check.steps is None or raised_in(call) <= documented)
    ]


def tests_read(sb: Sandbox, fail_to_pass: list[str]) -> list[str]:
    """The public attribute names the F2P tests' files read (`x.name`), sorted: they show a class's instances."""
    names: set[str] = set()
    for path in sorted({test.split("::", 1)[0] for test in fail_to_pass}):
        try:
            tree = parse_python(sb.read_file(f"{WORKSPACE}/{path}").decode("utf-8", "replace"))
        except (SandboxFileNotFound, FileTooLarge):
            continue
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
                names.add(node.attr)
    return sorted(names)[:MAX_READS]


def _reproduced(sb: Sandbox, calls: list[Call], unit_files: list[str]) -> tuple[list[Call], Reached]:
    """The calls whose outcome a fresh interpreter reproduces, under a third hash seed and with no test around them,
    and the lines of `unit_files` that those calls run."""
    if not calls:
        return [], {}
    checks = [call.check for call in calls]
    found = _run_calls(sb, checks, REPLAY_HASH_SEED, REPLAY_CALL_S, REPLAY_BUDGET_S, reach_files=unit_files)[0]
    kept = {index for index, (call, again) in enumerate(zip(calls, found)) if again and again.outcome == call.outcome}
    return [calls[index] for index in sorted(kept)], _reached_lines(sb, kept)


def _reached_lines(sb: Sandbox, indexes: set[int]) -> Reached:
    """{path: lines} that the replayed calls numbered `indexes` ran, as REACH_OUT has them; empty when it is gone."""
    try:
        text = sb.read_file(REACH_OUT).decode(errors="replace")
    except (SandboxFileNotFound, FileTooLarge) as error:
        log.info("the lines the calls ran could not be read back (%s): any mutant no call tells apart survives", error)
        return {}
    reached: Reached = {}
    for line in text.splitlines():
        try:
            index, files = json.loads(line)
            if index in indexes:
                for path, numbers in files.items():
                    reached.setdefault(path, set()).update(numbers)
        except (ValueError, TypeError, AttributeError):  # a torn last line, cut where the budget ended
            continue
    return reached


def pytest_plugin_modules(sb: Sandbox) -> list[str] | None:
    """Modules of the pytest11 entry points installed in the sandbox's image; None when they cannot be read."""
    result = sb.exec(["python", "-I", "-c", PLUGIN_MODULES_SOURCE.read_text()], timeout=60, cwd=WORKSPACE)
    try:
        modules = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        modules = None
    if result.exit_code != 0 or not isinstance(modules, list) or not all(isinstance(name, str) for name in modules):
        log.warning(
            "could not list the image's pytest11 plugins (exit %d: %s); the grader will read them from the image",
            result.exit_code,
            (result.stderr or result.stdout).strip()[-300:],
        )
        return None
    return modules
