"""Input/output checks of the deleted functions, recorded in the oracle sandbox for the grader to replay as hidden
tests.

The F2P tests run with the solution applied and the recorder plugin loaded (task_synth/io_recorder_plugin.py), twice,
under two hash seeds; the second time only the tests that made candidate calls run. Each recorded call is linked to the
first F2P test, by node id, that made it. Unseen calls, which no visible test makes, change one argument of a recorded
call a little and take their expected outcome from running them where the solution is applied. A call becomes a check
when a fresh interpreter under another hash seed reproduces its outcome, so that a check depends neither on hash order
nor on state a test set up.
"""

from __future__ import annotations

import ast
import itertools
import json
import logging
import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proto.call_values import MAX_DESCRIPTION, MAX_TEXT, SHIPPED_NAME, literal_text
from proto.tasks import IoCheck
from sandbox import FileTooLarge, Sandbox, SandboxFileNotFound
from sandbox.layout import WORKSPACE
from task_synth.deletion import Deletion
from task_synth.io_recorder_plugin import MAX_RECORDS
from task_synth.mutants import mutants_of
from task_synth.python_ast import literal_value, parse_python
from task_synth.repo_layout import RepoLayout
from task_synth.settings import SynthSettings
from task_synth.suite_runs import PLUGIN_DIR, SCRATCH
from task_synth.task_strength import Strength, measured_strength, strongest

log = logging.getLogger(__name__)
RECORDER = "regrow_io_recorder"
RECORDER_SOURCE = Path(__file__).with_name("io_recorder_plugin.py")
VALUES_SOURCE = Path(__file__).parents[1] / "proto" / "call_values.py"
IO_CONFIG = f"{SCRATCH}/io_config.json"
HASH_SEEDS = ("1", "2")
REPLAY_HASH_SEED = "3"
MAX_CHECKS = 8  # checks linked to the visible test that made their call
MAX_UNSEEN = 8  # checks of calls no visible test makes
MAX_CANDIDATES = 64  # distinct calls of the first run taken on to the second run and the replay
MAX_PROBES = 48  # perturbed calls run to find the unseen checks among
PROBE_CALL_S, PROBE_BUDGET_S = 1.0, 15.0  # a perturbed call may loop forever: each gets a second, all of them 15
REPLAY_CALL_S, REPLAY_BUDGET_S = 10.0, 90.0
MUTANT_BUDGET_S = 20.0  # one mutant's run of every reproduced call
# What a call raises once the unit is deleted (a stub, a removed name, a missing module): a check expecting one of
# these would pass without the solution.
DELETION_EXCEPTIONS = {"NotImplementedError", "AttributeError", "NameError", "ImportError", "ModuleNotFoundError"}
# What a perturbed call may raise for its new argument's type or the interpreter's limits rather than the unit's rules.
NOISE_EXCEPTIONS = {"TypeError", "RecursionError", "MemoryError"}
PLUGIN_MODULES_SCRIPT = (
    "import importlib.metadata as m, json; print(json.dumps(sorted({e.module for e in "
    "m.entry_points(group='pytest11')})))"
)
Arguments = dict[
    tuple[str, str], list[tuple[object, object]]
]  # (args, kwargs) of recorded calls, by (module, qualname)


@dataclass(frozen=True)
class Call:
    """One call: the check it makes (its `test` the F2P test that made it, None for an unseen call), and
    hash-order-free texts to compare calls by."""

    check: IoCheck
    key: tuple[str, str, str, str]  # module, qualname, args, kwargs (with the pickled inputs)
    outcome: tuple[str | None, str | None, str | None, str | None]  # result, raises, state after, arguments after
    internal: bool = False  # the library made it while a test ran: no test shows it, so it is an unseen call


@dataclass
class Recording:
    """The checks one task keeps, how many test cases recording them executed, and how strong they are."""

    checks: list[IoCheck]
    test_executions: int
    strength: Strength | None = None


def recorded_functions(deletion: Deletion, module_name: str) -> dict[str, list[str]]:
    """The deleted functions and methods whose calls become checks, as {module: [name or Class.method, ...]}; a
    method of a nested class and a whole class get none."""
    unit = deletion.unit
    if unit.kind in ("function", "feature") and "." not in unit.qualname:
        return {module_name: [unit.qualname]}
    if unit.kind == "method" and unit.qualname.count(".") == 1:
        return {module_name: [unit.qualname]}
    if unit.kind == "module":
        tree = parse_python(deletion.original[unit.path])
        body = tree.body if tree else []
        names = [node.name for node in body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
        return {module_name: names} if names else {}
    return {}


def canonical(value: object) -> str:
    """A text of a literal value that does not depend on set or dict order, so that runs under two hash seeds
    compare."""
    if isinstance(value, dict):
        return "dict{" + ", ".join(sorted(f"{canonical(key)}: {canonical(item)}" for key, item in value.items())) + "}"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}{{" + ", ".join(sorted(canonical(item) for item in value)) + "}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}[" + ", ".join(canonical(item) for item in value) + "]"
    return repr(value)


def parsed_call(raw: object, functions: dict[str, list[str]]) -> Call | None:
    """One entry of the recorder's output as a Call; None when it is malformed or names no recorded function."""
    if not isinstance(raw, dict) or not (raw.get("test") is None or isinstance(raw.get("test"), str)):
        return None
    try:
        check = IoCheck.model_validate({name: raw[name] for name in IoCheck.model_fields if name in raw})
        if check.qualname not in functions.get(check.module, ()) or (check.result is None) == (check.raises is None):
            return None
        if any(len(text) > MAX_TEXT for text in (check.args, check.kwargs)):
            return None
        if any(len(text or "") > MAX_DESCRIPTION for text in (check.result, check.state, check.args_after)):
            return None
        args, kwargs = literal_value(check.args), literal_value(check.kwargs)
        described = [
            None if text is None else canonical(literal_value(text))
            for text in (None if check.raises else check.result, check.state, check.args_after)
        ]
    except (KeyError, ValidationError, ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if type(args) is not tuple or type(kwargs) is not dict or not all(type(name) is str for name in kwargs):
        return None
    if check.raises is not None and (not check.raises.isidentifier() or check.raises in DELETION_EXCEPTIONS):
        return None
    method = "." in check.qualname
    if (method and (check.inputs is None or check.state is None)) or (check.args_after and check.inputs is None):
        return None
    outcome = (described[0], check.raises, described[1], described[2])
    return Call(check, check_key(check), outcome, internal=raw.get("internal") is True)


def check_key(check: IoCheck) -> tuple[str, str, str, str]:
    """What tells calls apart, free of hash order: the function, the arguments and the pickled inputs."""
    args, kwargs = canonical(literal_value(check.args)), canonical(literal_value(check.kwargs))
    return (check.module, check.qualname, args, f"{kwargs}|{check.inputs or ''}")


def unique_calls(calls: list[Call]) -> list[Call]:
    """Each distinct call once, in the order first seen; a call seen with two outcomes is no check and is dropped."""
    first: dict[tuple[str, str, str, str], Call] = {}
    conflicting = set()
    for call in calls:
        if first.setdefault(call.key, call).outcome != call.outcome:
            conflicting.add(call.key)
    return [call for key, call in first.items() if key not in conflicting]


def linked_calls(calls: list[Call], fail_to_pass: list[str]) -> list[Call]:
    """The unique calls, each linked to the first F2P test (by sorted node id) that made it; calls the tests make
    themselves first, then those only the library made while a test ran (internal: no test shows them).

    A call that no F2P test made (one at collection, say) is dropped: it is visible, so it is no unseen call either.
    """
    visible = set(fail_to_pass)
    tests: dict[tuple[str, str, str, str], str] = {}
    direct = set()
    for call in calls:
        if call.check.test in visible:
            tests[call.key] = min(tests.get(call.key, call.check.test), call.check.test)
            if not call.internal:
                direct.add(call.key)
    linked = [
        replace(call, check=call.check.model_copy(update={"test": tests[call.key]}), internal=call.key not in direct)
        for call in unique_calls(calls)
        if call.key in tests
    ]
    return sorted(linked, key=lambda call: call.internal)


def calls_in_both(first: list[Call], second: list[Call]) -> list[Call]:
    """The distinct calls of `first` that `second` made with the same outcome, in `first`'s order."""
    outcomes = {call.key: call.outcome for call in unique_calls(second)}
    return [call for call in unique_calls(first) if outcomes.get(call.key) == call.outcome]


def _in_turn(calls: list[Call], group: Callable[[Call], Hashable]) -> list[Call]:
    """`calls` reordered so that every group gives its first call, then every group its second, and so on."""
    turns: dict[Hashable, int] = {}
    ranked = []
    for order, call in enumerate(calls):
        turns[group(call)] = turns.get(group(call), -1) + 1
        ranked.append((turns[group(call)], order, call))
    return [call for _, _, call in sorted(ranked, key=lambda item: item[:2])]


def selected_checks(calls: list[Call], limit: int = MAX_CHECKS) -> list[IoCheck]:
    """Up to `limit` checks, taking each function's calls in turn and, within a function, each test's calls in turn."""
    spread = _in_turn(calls, lambda call: call.check.test)
    return [call.check for call in _in_turn(spread, lambda call: call.key[:2])[:limit]]


def recorded_arguments(raw: list[Any]) -> Arguments:
    """The arguments of every call in a recorder's output, whatever its outcome, by (module, qualname)."""
    found: Arguments = {}
    for item in raw:
        try:
            arguments = literal_value(item["args"]), literal_value(item["kwargs"])
            found.setdefault((item["module"], item["qualname"]), []).append(arguments)
        except (KeyError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return found


def perturbed_values(value: Any, depth: int = 2) -> list[object]:
    """Values of `value`'s type a small step away from it, for calls that no test makes.

    Integers move by one or two, flip sign or become 0; floats are scaled or negated; strings and bytes lose a
    character at either end, change case or gain a character; lists and tuples lose, repeat or change an element or
    are reversed; sets lose an element; dicts lose a key or change a value.
    """
    kind = type(value)
    if kind is bool:
        found: list[object] = [not value]
    elif kind is int:
        found = [value + 1, value - 1, value + 2, -value, 0]
    elif kind is float:
        found = [value * 2, value / 2, -value]
    elif kind is str:
        found = [value[1:], value[:-1], value.upper(), value.lower(), value[:1] + value, value + "a"]
    elif kind is bytes:
        found = [value[1:], value[:-1], value + b"a"]
    elif kind in (list, tuple):
        items = list(value)
        found = [items[1:], items[:-1], items[::-1], items[:1] + items]
        if depth > 1:
            ends = sorted({0, len(items) - 1}) if items else []
            found += [
                [*items[:at], new, *items[at + 1 :]] for at in ends for new in perturbed_values(items[at], depth - 1)
            ]
        found = [kind(items) for items in found]
    elif kind is set:
        found = [value - {item} for item in sorted(value, key=canonical)[:3]]
    elif kind is dict:
        keys = list(value)
        found = [{k: v for k, v in value.items() if k != key} for key in keys[:1] + keys[-1:]]
        if keys and depth > 1:
            found += [{**value, keys[0]: changed} for changed in perturbed_values(value[keys[0]], depth - 1)]
    else:
        return []
    own = canonical(value)
    return list({canonical(item): item for item in found if canonical(item) != own}.values())


def perturbed_calls(
    calls: list[Call], recorded: Arguments, rng: random.Random, limit: int = MAX_PROBES
) -> list[IoCheck]:
    """Up to `limit` calls that change one argument of one of `calls` and equal none of the `recorded` calls.

    Each call's variants are drawn in an order from `rng` and the calls give one in turn, so that the unseen calls
    spread over the recorded ones.
    """
    variants = []
    for call in calls:
        args: Any = literal_value(call.check.args)  # a tuple and a dict: the recorder wrote them
        kwargs: Any = literal_value(call.check.kwargs)
        mine = [
            (args[:at] + (new,) + args[at + 1 :], kwargs)
            for at, arg in enumerate(args)
            for new in perturbed_values(arg)
        ]
        mine += [(args, {**kwargs, name: new}) for name, value in kwargs.items() for new in perturbed_values(value)]
        rng.shuffle(mine)
        if call.check.args_after is None:  # pickled arguments are not perturbed
            variants.append([(call.key[:2], call.check.inputs, arguments) for arguments in mine])
    chosen: dict[tuple[str, str, str, str], IoCheck] = {}
    for (module, qualname), inputs, (args, kwargs) in (
        item for turn in itertools.zip_longest(*variants) for item in turn if item
    ):
        key = (module, qualname, canonical(args), f"{canonical(kwargs)}|{inputs or ''}")
        if len(chosen) >= limit or key in chosen or (args, kwargs) in recorded.get((module, qualname), ()):
            continue
        args_text, kwargs_text = literal_text(args), literal_text(kwargs)
        if args_text is not None and kwargs_text is not None:
            chosen[key] = IoCheck(module=module, qualname=qualname, args=args_text, kwargs=kwargs_text, inputs=inputs)
    return list(chosen.values())


def unseen_checks(calls: list[Call], linked: list[Call], limit: int = MAX_UNSEEN) -> list[IoCheck]:
    """Up to `limit` checks of unseen calls, each function's in turn.

    Calls whose outcome no linked call of the function has come first (a table of the visible answers with a fallback
    fails them), and returning calls before raising ones. At most half raise, and only an exception class that a
    linked call of the function raised, or that the library's own call raised while a passing test ran: the tests
    then show that the unit raises it, and an honest rewrite that raises another class on some edge case loses nothing.
    """
    shown = {(call.key[:2], call.outcome) for call in linked}
    documented = {(call.key[:2], call.check.raises) for call in linked if call.check.raises}
    ranked = sorted(calls, key=lambda call: ((call.key[:2], call.outcome) in shown, call.check.raises is not None))
    # The library's own call raised while a passing test ran: what it raises there is the unit's documented way.
    raising = [
        call
        for call in ranked
        if call.check.raises is not None and ((call.key[:2], call.check.raises) in documented or call.internal)
    ][: limit // 2]
    kept = [call for call in ranked if call.check.raises is None or any(call is other for other in raising)]
    return selected_checks(kept, limit)


def record_io_checks(
    sb: Sandbox, deletion: Deletion, layout: RepoLayout, fail_to_pass: list[str], settings: SynthSettings
) -> Recording:
    """Checks of the deleted functions from its F2P tests, in a sandbox whose workspace has the solution applied."""
    functions = recorded_functions(deletion, layout.modules[deletion.unit.path])
    if not functions or not fail_to_pass:
        return Recording([], 0)
    started = time.monotonic()
    sb.write_file(f"{PLUGIN_DIR}/{RECORDER}.py", RECORDER_SOURCE.read_text())
    sb.write_file(f"{PLUGIN_DIR}/{SHIPPED_NAME}.py", VALUES_SOURCE.read_text())
    library_files = sorted(f"/workspace/{path}" for path in layout.modules)
    sb.write_file(IO_CONFIG, json.dumps({"functions": functions, "library_files": library_files}))
    first, executions = _recorder_output(sb, HASH_SEEDS[0], fail_to_pass, settings)
    linked_all = linked_calls(_parsed_calls(first, functions), fail_to_pass)
    # The library's own calls get room of their own: a test that makes many calls would crowd them out.
    direct = [call for call in linked_all if not call.internal][:MAX_CANDIDATES]
    candidates = direct + [call for call in linked_all if call.internal][: MAX_CANDIDATES // 2]
    if not candidates:
        return Recording([], executions)
    tests = list(dict.fromkeys(call.check.test for call in candidates if call.check.test))
    second, more = _recorder_output(sb, HASH_SEEDS[1], tests, settings)
    agreed = calls_in_both(candidates, _parsed_calls(second, functions))
    probes: list[IoCheck] = []
    if len(first) < MAX_RECORDS:  # past the cap a call the tests make may be missing from `first`, and seem unseen
        rng = random.Random(f"{settings.seed}:{deletion.mode}:{deletion.unit.key}")
        probes = perturbed_calls(agreed, recorded_arguments(first), rng)
    probed = _probed(sb, probes)
    reproduced = _reproduced(sb, agreed + probed)
    linked = [call for call in reproduced if call.check.test is not None and not call.internal]
    unseen = [
        replace(call, check=call.check.model_copy(update={"test": None}))
        for call in reproduced
        if call.check.test is None or call.internal
    ]
    mutation_started = time.monotonic()
    kills = _mutant_kills(sb, deletion, reproduced, settings)
    # Each kind of check is chosen to kill the most mutants, then in its own order (spread over tests, new answers).
    spread = {check_key(check): check for check in selected_checks(linked, len(linked))}
    chosen_linked = [spread[key] for key in strongest(list(spread), [], kills, MAX_CHECKS)]
    by_key = {check_key(check): check for check in unseen_checks(unseen, linked, len(unseen))}
    linked_keys = [check_key(check) for check in chosen_linked]
    chosen_unseen = [by_key[key] for key in strongest(list(by_key), linked_keys, kills, MAX_UNSEEN)]
    checks = chosen_linked + chosen_unseen
    strength = measured_strength(kills, [check_key(check) for check in checks], time.monotonic() - mutation_started)
    log.info(
        "%s: %d distinct calls recorded, %d agree under two hash seeds, %d reproduce alone; %d perturbed calls run, "
        "%d give an outcome, %d reproduce; %d checks kept, %d of them unseen (%.1fs)",
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
    )
    return Recording(checks, executions + more, strength)


def _mutant_kills(
    sb: Sandbox, deletion: Deletion, calls: list[Call], settings: SynthSettings
) -> list[set[tuple[str, str, str, str]]] | None:
    """For each mutant of the unit, the keys of the calls whose outcome it changes; None when the unit gets no
    mutants (a module, a nested function) or there are no calls to run."""
    unit = deletion.unit
    original = deletion.original.get(unit.path)
    if not calls or original is None or unit.kind not in ("function", "feature", "method"):
        return None
    rng = random.Random(f"{settings.seed}:mutants:{unit.key}")
    mutants = mutants_of(original, unit.qualname, rng)
    if not mutants:
        return None
    target = f"{WORKSPACE}/{unit.path}"
    kills = []
    try:
        for mutant in mutants:
            sb.write_file(target, mutant.source)
            found = _call_outcomes(sb, [c.check for c in calls], REPLAY_HASH_SEED, PROBE_CALL_S, MUTANT_BUDGET_S)
            kills.append(
                {call.key for call, again in zip(calls, found) if again is None or again.outcome != call.outcome}
            )
    finally:
        sb.write_file(target, original)
    return kills


def _recorder_output(sb: Sandbox, seed: str, tests: list[str], settings: SynthSettings) -> tuple[list[object], int]:
    """What one recording run of `tests` wrote (the recorder's JSON list, empty when it left none), and how many test
    cases it ran."""
    out = f"{SCRATCH}/io_calls_{seed}.json"
    env = {"PYTHONPATH": PLUGIN_DIR, "PYTHONHASHSEED": seed, "REGROW_IO_CONFIG": IO_CONFIG, "REGROW_IO_OUT": out}
    script = f'{settings.test_command} -q -p {RECORDER} "$@"'
    result = sb.exec(["sh", "-c", script, "sh", *tests], timeout=settings.test_timeout_s, cwd=WORKSPACE, env=env)
    if result.timed_out:
        log.info("recording calls timed out after %gs; no checks from this run", settings.test_timeout_s)
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
    calls = f"{SCRATCH}/io_run_{seed}.json"  # a file: argv holds no more than 128 KiB in one argument
    rows = [[check.module, check.qualname, check.args, check.kwargs, check.inputs] for check in checks]
    sb.write_file(calls, json.dumps(rows))
    result = sb.exec(
        ["python", "-m", RECORDER, calls, str(call_s), str(budget_s)],
        timeout=budget_s + 30,
        cwd=WORKSPACE,
        # No bytecode: a mutant of the same size written within a second of the last would load the last one's.
        env={"PYTHONHASHSEED": seed, "PYTHONPATH": PLUGIN_DIR, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    found: list[Call | None] = [None] * len(checks)
    for line in result.stdout.splitlines():
        try:
            index, text, raises, state, after = json.loads(line)
        except (ValueError, TypeError):  # a line the functions wrote to the real stdout
            continue
        if type(index) is int and 0 <= index < len(checks):
            raw = {**checks[index].model_dump(), "result": text, "raises": raises, "state": state, "args_after": after}
            found[index] = parsed_call(raw, {checks[index].module: [checks[index].qualname]})
    if checks and not any(found):
        log.info("running %d calls gave no outcome (exit %d): %s", len(checks), result.exit_code, result.stderr[-500:])
    return found


def _probed(sb: Sandbox, probes: list[IoCheck]) -> list[Call]:
    """The perturbed calls with an outcome a check can expect, which the solution in the sandbox gives them."""
    if not probes:
        return []
    found = _call_outcomes(sb, probes, HASH_SEEDS[0], PROBE_CALL_S, PROBE_BUDGET_S)
    return [call for call in found if call is not None and call.check.raises not in NOISE_EXCEPTIONS]


def _reproduced(sb: Sandbox, calls: list[Call]) -> list[Call]:
    """The calls whose outcome a fresh interpreter reproduces, under a third hash seed and with no test around them."""
    if not calls:
        return []
    found = _call_outcomes(sb, [call.check for call in calls], REPLAY_HASH_SEED, REPLAY_CALL_S, REPLAY_BUDGET_S)
    return [call for call, again in zip(calls, found) if again is not None and again.outcome == call.outcome]


def pytest_plugin_modules(sb: Sandbox) -> list[str] | None:
    """Modules of the pytest11 entry points installed in the sandbox's image; None when they cannot be read."""
    result = sb.exec(["python", "-I", "-c", PLUGIN_MODULES_SCRIPT], timeout=60, cwd=WORKSPACE)
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
