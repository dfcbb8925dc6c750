"""The task record task_synth writes and env_server reads (SWE-bench-like field names)."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

DeletionKind = Literal["function", "method", "class", "module", "feature"]
DeletionMode = Literal["stub", "remove", "file"]
# PYTHONHASHSEED of every run of a task's tests: baseline, validation, the agent's `run` and grading.
HASH_SEED = 0


class DeletedUnit(BaseModel):
    """One piece of code the task removed."""

    path: str = Field(description="File path relative to the repository root.")
    qualname: str = Field(description="Qualified name, e.g. `Parser.parse`; the module path for modules.")
    kind: DeletionKind
    start_line: int
    end_line: int


class IoCheck(BaseModel):
    """One recorded call of a deleted function or method; the grader replays it in a fresh interpreter and compares
    its outcome, outside the container, with `result`, `raises`, `state` and `args_after`, which never enter one.

    Every value is Python literal text (`ast.literal_eval` reads it back; objects as proto.call_values describes
    them), so a check holds no code; `inputs` is a pickle, loaded only inside a grading container.
    """

    module: str = Field(description="Import path of the module that defines the function, e.g. `calc.ops`.")
    qualname: str = Field(description="The function's name in that module, or `Class.method` for a method.")
    args: str = Field(description="Positional arguments as a tuple literal, e.g. `(-5, 0, 10)`.")
    kwargs: str = Field(default="{}", description="Keyword arguments as a dict literal.")
    result: str | None = Field(
        default=None, description="The return value, described (a literal is itself); None when the call raised."
    )
    raises: str | None = Field(default=None, description="The exception's class name when the call raised.")
    test: str | None = Field(
        default=None,
        description="The FAIL_TO_PASS node id that made the call; None for a call "
        "no visible test makes. A visible test is credited only if the replays of its calls pass.",
    )
    inputs: str | None = Field(
        default=None,
        description="A base64 pickle of (receiver, arguments) as they were before the call: the receiver for a "
        "method (qualname `Class.method`, else None), and (args, kwargs) where they are no literals (then `args` "
        "and `kwargs` read `()` and `{}`; else None). Loaded only inside a grading container.",
    )
    state: str | None = Field(
        default=None,
        description="For a method: the receiver's attributes after the call, described (proto.call_values); the "
        "replay must leave its object so too. Held by the server, like `result`.",
    )
    args_after: str | None = Field(
        default=None,
        description="Pickled arguments as the call left them, described: a call that consumes a buffer must "
        "consume it alike. Held by the server.",
    )
    take: int | None = Field(
        default=None,
        ge=0,
        description="For a generator: how many items the replay draws at most. `result` is then "
        "`('generated', items, end)`, `end` being 'ended', ('raised', class name) or None where the test stopped "
        "drawing first.",
    )
    recipes: bool = Field(
        default=False,
        description="Whether `args` and `kwargs` hold a recipe per argument rather than the values: arguments no "
        "literal spells (a range, an iterator, a function by its name or by value), which every replay builds anew "
        "(proto.call_values.built).",
    )
    beside: str | None = Field(
        default=None,
        description="For a generator method: a second call's `(args, kwargs)` as literal text, made on the same "
        "receiver right after the first; the replay then draws from the two in turn, `take` items each at most, and "
        "`result` is the pair of their `('generated', items, end)` outcomes. Two consumers of one object (two "
        "cursors over one shared source) reach states that no single call does.",
    )
    steps: str | None = Field(
        default=None,
        description="For a deleted class: the program one test ran on its instances, as a tuple literal of steps "
        "(`('new', args, kwargs, refs)`, `('call', target, name, args, kwargs, refs)`, `('get', target, name)`; a "
        "target is the index of the step whose result it is, -1 the class; refs put earlier results in place of "
        "arguments). Then `qualname` names the class, `result` holds each step's outcome and `state` the public "
        "attributes of its instances at the end (see proto.call_values.replay_program).",
    )
    reads: list[str] = Field(
        default_factory=list,
        description="For a deleted class: the attributes the visible tests read, which describe its instances in "
        "`result` and `state`; an honest rewrite may lay out everything else its own way.",
    )


class UnitKillRate(BaseModel):
    """How strong one deleted unit's own checks are."""

    unit: str = Field(description="The unit, `path::qualname`.")
    kill_rate: float | None = Field(description="None: no mutant of it could be judged.")


class TaskStats(BaseModel):
    """Difficulty signals of one task."""

    lines_deleted: int
    covering_tests: int
    complexity: int = Field(description="Cyclomatic complexity of the deleted unit.")
    fail_to_pass: int = Field(default=0, description="How many FAIL_TO_PASS tests the task has.")
    statement_chars: int = Field(default=0, description="Length of the problem statement in characters.")
    hidden_checks: int = Field(
        default=0, description="Out-of-process checks the grader runs; 0: the visible tests decide."
    )
    mutants: int = Field(default=0, description="Mutants of the deleted unit made to measure the checks.")
    mutants_equivalent: int = Field(
        default=0, description="Mutants no recorded or probed call told apart from the original."
    )
    mutant_kill_rate: float | None = Field(
        default=None,
        description="Share of the other mutants the task's checks kill; None when none could be judged.",
    )
    unit_kill_rates: list[UnitKillRate] = Field(
        default_factory=list,
        description="Each deleted unit's share of its own non-equivalent mutants that its own checks kill; a "
        "mutant some call tells apart but none of the unit's checks does survives.",
    )
    mutation_s: float = Field(default=0.0, description="Seconds the mutation stage took for this task.")
    baseline_s: float | None = Field(
        default=None,
        description="Seconds the FAIL_TO_PASS and PASS_TO_PASS tests took with the solution at synthesis; the "
        "grader's time limit follows it. None for older tasks: the server's cap applies.",
    )


class TaskRecord(BaseModel):
    """One line of tasks.jsonl."""

    instance_id: str
    repo: str
    source_commit: str
    image: str = Field(
        description="Docker image an episode starts from: the repository image when the task is stored as "
        "files (`workspace_archive` set), else an image that holds the deleted workspace at /workspace."
    )
    workspace_archive: str | None = Field(
        default=None,
        description="The task's /workspace (scrubbed, one commit) as a gzipped tar, relative to the task store; "
        "a reset writes it into a container of `image`. None: the image holds the workspace.",
    )
    repo_dir: str | None = Field(
        default=None,
        description="The repository's folder in the task store: `install.tar.gz`, what the editable install "
        "adds to the image's venv (written with the workspace), and `wheels/`, from which `regrow images build "
        "--tasks` "
        "rebuilds `image` on another host.",
    )
    mode: DeletionMode
    deleted: list[DeletedUnit]
    problem_statement: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    test_command: str
    solution_patch: str = Field(description="Kept in the task store only; never in an agent image.")
    test_files: list[str] = Field(default_factory=list, description="Pristine tests, under hidden/<id>/.")
    split: str = "train"
    pytest_plugins: list[str] | None = Field(
        default=None,
        description="Modules of the pytest11 plugins the repository image installs; the grader names them "
        "with -p since it turns plugin autoload off. None: the grader reads them from the image.",
    )
    hash_seed: int = Field(
        default=HASH_SEED,
        description="PYTHONHASHSEED every run of the tests used, from the baseline to "
        "grading, so that ids and orders built from sets and dicts of strings match from run to run.",
    )
    stats: TaskStats
    created_at: datetime
    synth_version: str
