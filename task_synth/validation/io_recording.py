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

from proto.python_ast import parse_python
from proto.tasks import IoCheck
from sandbox import FileTooLarge, Sandbox, SandboxFileNotFound
from sandbox.layout import WORKSPACE
from task_synth.candidates.deletion import Deletion
from task_synth.candidates.units import deleted_units
from task_synth.repository.editable_install import SCRATCH
from task_synth.repository.repo_layout import RepoLayout
from task_synth.settings import SynthSettings
from task_synth.validation.call_runs import (
    HASH_SEEDS,
    MUTANT_BUDGET_S,
    MUTANTS_JSON,
    PROBE_BUDGET_S,
    PROBE_CALL_S,
    RECORDER,
    RECORDER_FILES,
    REPLAY_HASH_SEED,
    Reached,
    probed,
    replayed,
    run_calls,
    union,
)
from task_synth.validation.inside.io_recorder_plugin import MAX_RECORDS
from task_synth.validation.mutants import MAX_MUTANTS, mutants_of, site_lines
from task_synth.validation.recorded_calls import Call, calls_in_both, check_key, linked_calls, parsed_call, raised_in
from task_synth.validation.suite_runs import PLUGIN_DIR
from task_synth.validation.task_strength import Strength
from task_synth.validation.unit_checks import UNREACHED, UnitChecks, UnitKills, chosen_for_units
from task_synth.validation.unseen_calls import (
    MAX_PROBES,
    Arguments,
    perturbed_calls,
    receiver_pools,
    recorded_arguments,
)

log = logging.getLogger(__name__)
IO_CONFIG = f"{SCRATCH}/io_config.json"
RECORDING_MIN_S, RECORDING_FACTOR = 60.0, 10.0  # a recording run's time limit, from the tests' own time
MAX_CANDIDATES = 64  # distinct calls of the first run taken on to the second run and the replay
MAX_PROBE_SHARES = 4  # a group's perturbed calls and their time grow with its units, up to this many units' worth
MIN_UNIT_MUTANTS = 10  # mutants of each unit of a group at least, so that each unit's kill rate means something
PLUGIN_MODULES_SOURCE = Path(__file__).with_name("inside") / "pytest_plugin_modules.py"
MAX_READS = 64  # attribute names the visible tests read that show a class's instances


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
    library_files = sorted(f"{WORKSPACE}/{path}" for path in layout.modules)
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
    documented = set().union(*(raised_in(call) for call in agreed))
    found = probed(sb, probes, documented, PROBE_BUDGET_S * share)
    laps.append(time.monotonic())
    replay = replayed(sb, agreed + found, sorted(reached_files(deletion)))
    replay += _probed_toward_unreached(sb, deletion, replay, recorded, probes, documented, rng, share)
    reproduced_calls, reached = [call for call, _ in replay], union([lines for _, lines in replay])
    linked = [call for call in reproduced_calls if call.check.test is not None and not call.internal]
    unseen = [
        replace(call, check=call.check.model_copy(update={"test": None}))
        for call in reproduced_calls
        if call.check.test is None or call.internal
    ]
    mutation_started = time.monotonic()
    laps.append(mutation_started)
    kills = _mutant_kills(sb, deletion, reproduced_calls, settings, layout.modules, reached)
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
        len(found),
        len(reproduced_calls) - len(linked),
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
    outcomes = run_calls(
        sb, [c.check for c in calls], REPLAY_HASH_SEED, PROBE_CALL_S, MUTANT_BUDGET_S, mutants=len(mutants)
    )
    kills = []
    for (owner, where, mutant), found in zip(made, outcomes, strict=True):
        killed = {call.key for call, again in zip(calls, found, strict=True) if _told_apart(call, again)}
        if not killed and mutant.line not in reached.get(where["path"], ()):
            killed = {UNREACHED}
        kills.append((owner, killed))
    return kills


def _probed_toward_unreached(
    sb: Sandbox,
    deletion: Deletion,
    replay: list[tuple[Call, Reached]],
    recorded: Arguments,
    tried: list[IoCheck],
    documented: set[str],
    rng: random.Random,
    share: int,
) -> list[tuple[Call, Reached]]:
    """A second round of perturbed calls, one step from the first round's, for a unit with lines a mutant can change
    that no call runs: taken from the calls that ran the most lines no visible call ran, and kept when they reproduce.
    A mutant on a line no call runs survives every choice of checks (`_mutant_kills`)."""
    reached = union([lines for _, lines in replay])
    missing = _sites_unreached(deletion, reached)
    if not missing:
        return []
    visible = union([lines for call, lines in replay if call.check.test is not None])

    def new_lines(item: tuple[Call, Reached]) -> int:
        return sum(len(lines - visible.get(path, set())) for path, lines in item[1].items())

    seeds = [call for call, _ in sorted((item for item in replay if item[0].check.test is None), key=new_lines)[::-1]]
    seen = {check_key(check) for check in tried}
    probes = [p for p in perturbed_calls(seeds, recorded, rng, MAX_PROBES * share) if check_key(p) not in seen]
    found = probed(sb, probes, documented, PROBE_BUDGET_S * share)
    more = replayed(sb, found, sorted(reached_files(deletion)))
    log.info(
        "%s: no call ran %d lines a mutant can change; %d more perturbed calls, %d reproduce; %d of those lines left",
        deletion.unit.key,
        len(missing),
        len(probes),
        len(more),
        len(_sites_unreached(deletion, union([reached, *(lines for _, lines in more)]))),
    )
    return more


def reached_files(deletion: Deletion) -> set[str]:
    """The sandbox paths of the files the deleted units sit in, whose lines the replay traces."""
    return {f"{WORKSPACE}/{piece.path}" for piece in deletion.unit.pieces}


def _sites_unreached(deletion: Deletion, reached: Reached) -> set[tuple[str, int]]:
    """(path, line) of each line in the units where a mutant can change something and no call in `reached` ran."""
    return {
        (piece.path, line)
        for piece in deletion.unit.pieces
        if (original := deletion.original.get(piece.path)) is not None
        for line in site_lines(original, piece.qualname)
        if line not in reached.get(f"{WORKSPACE}/{piece.path}", set())
    }


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
