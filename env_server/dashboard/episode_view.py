"""One recorded episode as the viewer shows it: steps, the final diff, the reward test by test.

Without REGROW_SERVER_SHOW_SOLUTIONS, hidden checks appear only as a count and their names are blotted out of every
text; the task's solution patch is never shown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from proto.observations import TestOutcome
from proto.traces import EpisodeTrace

FOLD_CHARS = 1500
FOLD_LINES = 25
HIDDEN = "[hidden check]"


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "file", "hunk", "add", "del", "note" or "same"
    text: str


@dataclass(frozen=True)
class StepView:
    index: int
    tool: str
    summary: str  # the command, the path, or the arguments in short
    detail: str  # the whole arguments when they say more than the summary (a written file's content)
    output: str
    folded: bool
    exit_code: int | None
    feedback: str | None
    error: str | None
    truncated: bool
    duration_s: float


@dataclass
class EpisodeView:
    trace: EpisodeTrace
    steps: list[StepView]
    diff: list[DiffLine]
    tests: list[TestOutcome]  # without the hidden checks unless the operator shows solutions
    solution: list[DiffLine] = field(default_factory=list)

    @property
    def tests_shown(self) -> list[TestOutcome]:
        """The rows a reader looks for: FAIL_TO_PASS, hidden, and every test that did not pass."""
        return [t for t in self.tests if not _kept(t)]

    @property
    def tests_kept(self) -> list[TestOutcome]:
        """PASS_TO_PASS tests that still pass: a real suite has hundreds, so the page folds them."""
        return [t for t in self.tests if _kept(t)]

    @property
    def hidden_passed(self) -> int:
        return self.trace.reward_details.hidden_passed if self.trace.reward_details else 0

    @property
    def hidden_total(self) -> int:
        return self.trace.reward_details.hidden_total if self.trace.reward_details else 0

    @property
    def duration_s(self) -> float | None:
        ended = self.trace.ended_at
        return (ended - self.trace.started_at).total_seconds() if ended else None


def _kept(outcome: TestOutcome) -> bool:
    return outcome.group == "PASS_TO_PASS" and outcome.outcome == "passed"


def diff_lines(text: str) -> list[DiffLine]:
    """A unified diff's lines, each with the kind the page colours it by."""
    lines = []
    for line in text.splitlines():
        if line.startswith(("--- ", "+++ ", "diff ", "Binary files ")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith(" ") or not line:
            kind = "same"
        else:
            kind = "note"
        lines.append(DiffLine(kind, line))
    return lines


class Redactor:
    """Blots the names of hidden checks out of text shown to people who may not see them."""

    def __init__(self, names: list[str]):
        # Longest first, so that no name is cut by a shorter one it contains.
        self._names = sorted(set(names), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for name in self._names:
            text = text.replace(name, HIDDEN)
        return text


def _summary(tool: str, args: dict) -> tuple[str, str]:
    if tool == "run":
        return str(args.get("command", "")), ""
    if tool == "write_file":
        return str(args.get("path", "")), str(args.get("content", ""))
    if tool in ("read_file", "list_dir"):
        return str(args.get("path", "")), ""
    rest = json.dumps(args, ensure_ascii=False, indent=1)
    return (rest if len(rest) <= 120 else rest[:117] + "..."), (rest if len(rest) > 120 else "")


def episode_view(trace: EpisodeTrace, solution_patch: str | None, show_solutions: bool) -> EpisodeView:
    details = trace.reward_details
    hidden = [t.nodeid for t in details.tests if t.group == "HIDDEN"] if details else []
    redact = (lambda text: text) if show_solutions or not hidden else Redactor(hidden)
    steps = []
    for step in trace.steps:
        observation = step.observation
        summary, detail = _summary(step.action.tool, step.action.args)
        output = redact(observation.output)
        steps.append(
            StepView(
                index=step.index,
                tool=step.action.tool,
                summary=redact(summary),
                detail=redact(detail),
                output=output,
                folded=len(output) > FOLD_CHARS or output.count("\n") > FOLD_LINES,
                exit_code=observation.exit_code,
                feedback=redact(observation.feedback) if observation.feedback else None,
                error=observation.metadata.get("tool_error"),
                truncated=observation.truncated,
                duration_s=step.duration_s,
            )
        )
    outcomes = details.tests if details else []
    return EpisodeView(
        trace=trace,
        steps=steps,
        diff=diff_lines(details.diff) if details else [],
        tests=[t for t in outcomes if show_solutions or t.group != "HIDDEN"],
        solution=diff_lines(solution_patch) if show_solutions and solution_patch else [],
    )
