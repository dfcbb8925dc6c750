"""Running recorded and perturbed calls in a synthesis sandbox, outside any test: each call in one fresh interpreter
under a time limit (inside/call_runner.py), against the solution or against each mutant of the unit,
and the lines of the unit's files each replayed call runs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from proto import call_replay, call_values
from proto.tasks import IoCheck
from sandbox import FileTooLarge, Sandbox, SandboxFileNotFound
from sandbox.layout import WORKSPACE
from task_synth.repository.editable_install import SCRATCH
from task_synth.validation.inside.call_runner import IMPORT_ALLOWANCE_S
from task_synth.validation.recorded_calls import Call, parsed_call, raised_in
from task_synth.validation.suite_runs import PLUGIN_DIR
from task_synth.validation.unseen_calls import NOISE_EXCEPTIONS

log = logging.getLogger(__name__)
RECORDER = "regrow_io_recorder"
RECORDER_SOURCE = Path(__file__).with_name("inside") / "io_recorder_plugin.py"
PROGRAMS = "regrow_program_recorder"
PROGRAMS_SOURCE = Path(__file__).with_name("inside") / "program_recorder.py"
RUNNER = "regrow_call_runner"
RUNNER_SOURCE = Path(__file__).with_name("inside") / "call_runner.py"
INPUTS = "regrow_call_inputs"
INPUTS_SOURCE = Path(__file__).with_name("inside") / "call_inputs.py"
POOL = "regrow_receiver_pool"
POOL_SOURCE = Path(__file__).with_name("inside") / "receiver_pool.py"
REACH = "regrow_line_reach"
REACH_SOURCE = Path(__file__).with_name("inside") / "line_reach.py"
PATCH = "regrow_mutant_patch"
PATCH_SOURCE = Path(__file__).with_name("inside") / "mutant_patch.py"
RECIPES = "regrow_argument_recipes"
RECIPES_SOURCE = Path(__file__).with_name("inside") / "argument_recipes.py"
# The recorder, the call runner and the modules they import, by their names beside them in the sandbox.
RECORDER_FILES = {
    f"{RECORDER}.py": RECORDER_SOURCE,
    f"{RUNNER}.py": RUNNER_SOURCE,
    f"{INPUTS}.py": INPUTS_SOURCE,
    f"{call_values.SHIPPED_NAME}.py": Path(call_values.__file__),
    f"{call_replay.SHIPPED_NAME}.py": Path(call_replay.__file__),
    f"{PROGRAMS}.py": PROGRAMS_SOURCE,
    f"{RECIPES}.py": RECIPES_SOURCE,
    f"{POOL}.py": POOL_SOURCE,
    f"{REACH}.py": REACH_SOURCE,
    f"{PATCH}.py": PATCH_SOURCE,
}
REACH_OUT = f"{SCRATCH}/io_reach.jsonl"  # a JSON line [index, {path: [line, ...]}] per replayed call
MUTANTS_JSON = f"{SCRATCH}/io_mutants.json"  # {"mutants": [{"module": name, "path": its file, "source": text}]}
HASH_SEEDS = ("1", "2")
REPLAY_HASH_SEED = "3"
PROBE_CALL_S, PROBE_BUDGET_S = 1.0, 15.0  # a perturbed call may loop forever: each gets a second, all of them 15
REPLAY_CALL_S, REPLAY_BUDGET_S = 10.0, 90.0
MUTANT_BUDGET_S = 20.0  # one mutant's run of every reproduced call


Reached = dict[str, set[int]]  # sandbox path -> the lines of it that reproduced calls ran


def call_outcomes(sb: Sandbox, checks: list[IoCheck], seed: str, call_s: float, budget_s: float) -> list[Call | None]:
    """Each check's call as run in one fresh interpreter in the sandbox; None for a call that ran out of time, gave
    no literal outcome, changed its arguments, or did not run before the budget was spent."""
    return run_calls(sb, checks, seed, call_s, budget_s)[0]


def run_calls(
    sb: Sandbox,
    checks: list[IoCheck],
    seed: str,
    call_s: float,
    budget_s: float,
    mutants: int = 0,
    reach_files: list[str] | None = None,
) -> list[list[Call | None]]:
    """The checks' outcomes as `call_outcomes` has them: one list, or with `mutants` one list per mutant that
    MUTANTS_JSON holds, all run by one command (a forked child each) instead of one command per mutant. With
    `reach_files`, the lines each call runs in those files go to REACH_OUT."""
    calls = f"{SCRATCH}/io_run_{seed}.json"  # a file: argv holds no more than 128 KiB in one argument
    fields = ("module", "qualname", "args", "kwargs", "inputs", "steps", "reads", "take", "recipes", "beside")
    rows = [{name: getattr(check, name) for name in fields} for check in checks]
    sb.write_file(calls, json.dumps(rows))
    limits = [str(call_s), str(budget_s)]
    arguments = [*(["--mutants", MUTANTS_JSON] if mutants else []), calls, *limits]
    # Into a file: every mutant's lines together pass the 64 KiB an exec's output keeps, and the rest would be lost.
    out = f"{SCRATCH}/io_outcomes_{seed}.jsonl"
    result = sb.exec(
        ["sh", "-c", f'rm -f {REACH_OUT}; python -m {RUNNER} "$@" > {out}', "sh", *arguments],
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


def probed(sb: Sandbox, probes: list[IoCheck], documented: set[str], budget_s: float) -> list[Call]:
    """The perturbed calls with an outcome a check can expect, which the solution in the sandbox gives them. A
    program's step may raise only what a recorded program raised: an honest rewrite may check its new argument in
    another order."""
    if not probes:
        return []
    found = call_outcomes(sb, probes, HASH_SEEDS[0], PROBE_CALL_S, budget_s)
    return [
        call
        for call in found
        if call is not None
        and not raised_in(call) & NOISE_EXCEPTIONS
        and (call.check.steps is None or raised_in(call) <= documented)
    ]


def reproduced(sb: Sandbox, calls: list[Call]) -> list[Call]:
    """The calls whose outcome a fresh interpreter reproduces, under a third hash seed and with no test around them."""
    return [call for call, _ in replayed(sb, calls, [])]


def replayed(sb: Sandbox, calls: list[Call], unit_files: list[str]) -> list[tuple[Call, Reached]]:
    """The calls that `reproduced` keeps, each with the lines of `unit_files` it ran."""
    if not calls:
        return []
    checks = [call.check for call in calls]
    found = run_calls(sb, checks, REPLAY_HASH_SEED, REPLAY_CALL_S, REPLAY_BUDGET_S, reach_files=unit_files)[0]
    kept = [index for index, (call, again) in enumerate(zip(calls, found)) if again and again.outcome == call.outcome]
    lines = reached_lines(sb, set(kept)) if unit_files else {}
    return [(calls[index], lines.get(index, {})) for index in kept]


def reached_lines(sb: Sandbox, indexes: set[int]) -> dict[int, Reached]:
    """{path: lines} that each replayed call numbered in `indexes` ran, as REACH_OUT has them; none when it is gone."""
    try:
        text = sb.read_file(REACH_OUT).decode(errors="replace")
    except (SandboxFileNotFound, FileTooLarge) as error:
        log.info("the lines the calls ran could not be read back (%s): any mutant no call tells apart survives", error)
        return {}
    found: dict[int, Reached] = {}
    for line in text.splitlines():
        try:
            index, files = json.loads(line)
            if index in indexes:
                found[index] = {path: set(numbers) for path, numbers in files.items()}
        except (ValueError, TypeError, AttributeError):  # a torn last line, cut where the budget ended
            continue
    return found


def union(reaches: list[Reached]) -> Reached:
    """The lines any of `reaches` ran."""
    together: Reached = {}
    for reach in reaches:
        for path, lines in reach.items():
            together.setdefault(path, set()).update(lines)
    return together
