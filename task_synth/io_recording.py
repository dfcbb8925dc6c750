"""Input/output checks of the deleted functions, recorded in the oracle sandbox for the grader to replay as hidden tests.

The F2P tests run with the solution applied and the recorder plugin loaded (task_synth/io_recorder_plugin.py), twice,
under two hash seeds; the second time only the tests that made candidate calls run. A call becomes a check when both
runs agree on its outcome and a fresh interpreter reproduces it, so that a check depends neither on hash order nor on
state a test set up.
"""

from __future__ import annotations

import ast
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from proto.tasks import IoCheck
from sandbox import FileTooLarge, Sandbox, SandboxFileNotFound
from task_synth.deletion import Deletion
from task_synth.io_recorder_plugin import MAX_RECORDS, MAX_TEXT
from task_synth.python_ast import literal_value, parse_python
from task_synth.repo_layout import RepoLayout
from task_synth.settings import SynthSettings
from task_synth.test_runs import PLUGIN_DIR, SCRATCH

log = logging.getLogger(__name__)
RECORDER = "regrow_io_recorder"
RECORDER_SOURCE = Path(__file__).with_name("io_recorder_plugin.py")
IO_CONFIG = f"{SCRATCH}/io_config.json"
HASH_SEEDS = ("1", "2")
REPLAY_HASH_SEED = "3"
REPLAY_TIMEOUT_S = 120
MAX_CHECKS = 8
MAX_CANDIDATES = 64  # distinct calls of the first run taken on to the second run and the replay
# What a call raises once the unit is deleted (a stub, a removed name, a missing module): a check expecting one of
# these would pass without the solution.
DELETION_EXCEPTIONS = {"NotImplementedError", "AttributeError", "NameError", "ImportError", "ModuleNotFoundError"}
# Replays each check (JSON in argv[1]) as the grader will, in a fresh interpreter; prints one verdict per check.
REPLAY_SCRIPT = '''
import ast, importlib, io, json, sys


def reproduces(check):
    try:
        function = getattr(importlib.import_module(check["module"]), check["qualname"])
    except Exception:
        return False
    try:
        result = function(*ast.literal_eval(check["args"]), **ast.literal_eval(check["kwargs"]))
    except Exception as error:
        return type(error).__name__ == check["raises"]
    try:
        return check["raises"] is None and bool(result == ast.literal_eval(check["result"]))
    except Exception:
        return False


stdout, sys.stdout = sys.stdout, io.StringIO()  # what the functions print is not the verdict
verdicts = [reproduces(check) for check in json.loads(sys.argv[1])]
sys.stdout = stdout
print(json.dumps(verdicts))
'''
PLUGIN_MODULES_SCRIPT = (
    "import importlib.metadata as m, json; print(json.dumps(sorted({e.module for e in m.entry_points(group='pytest11')})))"
)


@dataclass(frozen=True)
class Call:
    """One recorded call: the check it makes, the test that made it, and hash-order-free texts to compare calls by."""

    check: IoCheck
    test: str | None
    key: tuple[str, str, str, str]
    outcome: tuple[str | None, str | None]


@dataclass
class Recording:
    """The checks one task keeps, and how many test cases recording them executed."""

    checks: list[IoCheck]
    test_executions: int


def recorded_functions(deletion: Deletion, module_name: str) -> dict[str, list[str]]:
    """The deleted module-level functions whose calls become checks, as {module: [name, ...]}; none for classes and methods."""
    unit = deletion.unit
    if unit.kind in ("function", "feature") and "." not in unit.qualname:
        return {module_name: [unit.qualname]}
    if unit.kind == "module":
        tree = parse_python(deletion.original[unit.path])
        body = tree.body if tree else []
        names = [node.name for node in body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
        return {module_name: names} if names else {}
    return {}


def canonical(value: object) -> str:
    """A text of a literal value that does not depend on set or dict order, so that runs under two hash seeds compare."""
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
        check = IoCheck.model_validate({name: raw[name] for name in IoCheck.model_fields})
        if check.qualname not in functions.get(check.module, ()) or (check.result is None) == (check.raises is None):
            return None
        if any(len(text) > MAX_TEXT for text in (check.args, check.kwargs, check.result or "")):
            return None
        args, kwargs = literal_value(check.args), literal_value(check.kwargs)
        result = None if check.raises else literal_value(check.result)
    except (KeyError, ValidationError, ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if type(args) is not tuple or type(kwargs) is not dict or not all(type(name) is str for name in kwargs):
        return None
    if check.raises is not None and (not check.raises.isidentifier() or check.raises in DELETION_EXCEPTIONS):
        return None
    key = (check.module, check.qualname, canonical(args), canonical(kwargs))
    return Call(check, raw.get("test"), key, (None if check.raises else canonical(result), check.raises))


def unique_calls(calls: list[Call]) -> list[Call]:
    """Each distinct call once, in the order first seen; a call seen with two outcomes is no check and is dropped."""
    first: dict[tuple[str, str, str, str], Call] = {}
    conflicting = set()
    for call in calls:
        if first.setdefault(call.key, call).outcome != call.outcome:
            conflicting.add(call.key)
    return [call for key, call in first.items() if key not in conflicting]


def calls_in_both(first: list[Call], second: list[Call]) -> list[Call]:
    """The distinct calls of `first` that `second` made with the same outcome, in `first`'s order."""
    outcomes = {call.key: call.outcome for call in unique_calls(second)}
    return [call for call in unique_calls(first) if outcomes.get(call.key) == call.outcome]


def selected_checks(calls: list[Call], limit: int = MAX_CHECKS) -> list[IoCheck]:
    """Up to `limit` checks, taking each function's calls in turn (round robin), each in the order first seen."""
    turns: dict[tuple[str, str], int] = {}
    ranked = []
    for order, call in enumerate(calls):
        turns[call.key[:2]] = turns.get(call.key[:2], -1) + 1
        ranked.append((turns[call.key[:2]], order, call.check))
    return [check for _, _, check in sorted(ranked, key=lambda item: item[:2])[:limit]]


def record_io_checks(sb: Sandbox, deletion: Deletion, layout: RepoLayout, fail_to_pass: list[str], settings: SynthSettings) -> Recording:
    """Checks of the deleted functions from its F2P tests, in a sandbox whose workspace has the solution applied."""
    functions = recorded_functions(deletion, layout.modules[deletion.unit.path])
    if not functions or not fail_to_pass:
        return Recording([], 0)
    started = time.monotonic()
    sb.write_file(f"{PLUGIN_DIR}/{RECORDER}.py", RECORDER_SOURCE.read_text())
    library_files = sorted(f"/workspace/{path}" for path in layout.modules)
    sb.write_file(IO_CONFIG, json.dumps({"functions": functions, "library_files": library_files}))
    first, executions = _recorded_calls(sb, HASH_SEEDS[0], fail_to_pass, functions, settings)
    candidates = unique_calls(first)[:MAX_CANDIDATES]
    if not candidates:
        return Recording([], executions)
    tests = list(dict.fromkeys(call.test for call in candidates))
    if not set(tests) <= set(fail_to_pass):  # a call during collection, or a node id pytest spells differently
        tests = fail_to_pass
    second, more = _recorded_calls(sb, HASH_SEEDS[1], tests, functions, settings)
    agreed = calls_in_both(candidates, second)
    reproduced = _reproduced(sb, agreed)
    checks = selected_checks(reproduced)
    log.info(
        "%s: %d distinct calls recorded, %d agree under two hash seeds, %d reproduce alone, %d kept (%.1fs)",
        deletion.unit.key, len(candidates), len(agreed), len(reproduced), len(checks), time.monotonic() - started,
    )
    return Recording(checks, executions + more)


def _recorded_calls(sb: Sandbox, seed: str, tests: list[str], functions: dict[str, list[str]], settings: SynthSettings) -> tuple[list[Call], int]:
    """The calls one recording run of `tests` made, and how many test cases it ran."""
    out = f"{SCRATCH}/io_calls_{seed}.json"
    env = {"PYTHONPATH": PLUGIN_DIR, "PYTHONHASHSEED": seed, "REGROW_IO_CONFIG": IO_CONFIG, "REGROW_IO_OUT": out}
    script = f'{settings.test_command} -q -p {RECORDER} "$@"'
    result = sb.exec(["sh", "-c", script, "sh", *tests], timeout=settings.test_timeout_s, cwd="/workspace", env=env)
    if result.timed_out:
        log.info("recording calls timed out after %gs; no checks from this run", settings.test_timeout_s)
        return [], len(tests)
    try:
        raw = json.loads(sb.read_file(out))
    except (SandboxFileNotFound, FileTooLarge, ValueError) as error:
        log.info("the recording run left no calls (%s): %s", error, (result.stdout + result.stderr)[-500:])
        return [], len(tests)
    if not isinstance(raw, list):
        return [], len(tests)
    return [call for item in raw[:MAX_RECORDS] if (call := parsed_call(item, functions)) is not None], len(tests)


def _reproduced(sb: Sandbox, calls: list[Call]) -> list[Call]:
    """The calls whose outcome a fresh interpreter reproduces, under a third hash seed and with no test around them."""
    if not calls:
        return []
    checks = json.dumps([call.check.model_dump() for call in calls])
    result = sb.exec(
        ["python", "-c", REPLAY_SCRIPT, checks], timeout=REPLAY_TIMEOUT_S, cwd="/workspace", env={"PYTHONHASHSEED": REPLAY_HASH_SEED}
    )
    try:
        verdicts = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        verdicts = None
    if not isinstance(verdicts, list) or len(verdicts) != len(calls):
        log.info("replaying %d calls gave no verdicts (exit %d): %s", len(calls), result.exit_code, result.stderr[-500:])
        return []
    return [call for call, verdict in zip(calls, verdicts) if verdict is True]


def pytest_plugin_modules(sb: Sandbox) -> list[str] | None:
    """Modules of the pytest11 entry points installed in the sandbox's image; None when they cannot be read."""
    result = sb.exec(["python", "-I", "-c", PLUGIN_MODULES_SCRIPT], timeout=60, cwd="/workspace")
    try:
        modules = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        modules = None
    if result.exit_code != 0 or not isinstance(modules, list) or not all(isinstance(name, str) for name in modules):
        log.warning(
            "could not list the image's pytest11 plugins (exit %d: %s); the grader will read them from the image",
            result.exit_code, (result.stderr or result.stdout).strip()[-300:],
        )
        return None
    return modules
