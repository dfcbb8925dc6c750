"""One replay run: for each turn of each trace, ask the teachers, decide, and emit pairs with reference logprobs."""

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from proto.traces import EpisodeTrace, StepTrace
from proto.transcript import ASSISTANT_TEXT_KEY, PARSE_ERROR_KEY, format_tool_call, transcript, turns
from trainer_client.channels.preference_pairs import ChatMessage, PreferencePair
from trainer_client.replay.pair_decision import Outcome, StepDecision, TeacherVote, decide_step
from trainer_client.replay.policy_scorer import ActionScore, PolicyScorer
from trainer_client.replay.replay_report import ReplayReport, TeacherTally, TraceTally, summarize_latency
from trainer_client.replay.spending import BudgetExhausted, Reservation, SpendingCap
from trainer_client.replay.teacher_call import TeacherError, worst_case_cost_usd
from trainer_client.replay.teachers import Teacher
from trainer_client.replay.teachers_config import TeacherConfig
from trainer_client.rollout.chat_format import parse_tool_calls

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplaySettings:
    """How a run decides: the agreement share for a pair and the optional entropy gate (nats)."""

    min_agreement: float = 0.5
    entropy_threshold: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.min_agreement <= 1:
            raise ValueError(f"min_agreement must be in (0, 1], got {self.min_agreement}")


def turn_starts(trace: EpisodeTrace) -> list[StepTrace]:
    """The steps where the student chose a new turn (later calls of one turn follow from its first)."""
    return [turn[0] for turn in turns(trace.steps)]


def read_traces(path: Path) -> list[EpisodeTrace]:
    """The traces of a `regrow traces export` JSONL file; a bad line fails with its line number."""
    traces = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                traces.append(EpisodeTrace.model_validate_json(line))
            except ValidationError as error:
                raise ValueError(f"{path}:{number} is not an EpisodeTrace: {error}") from error
    return traces


class ReplayRun:
    """Replays traces against teachers under one spending cap and writes pairs through `emit`."""

    def __init__(
        self,
        teachers: list[tuple[TeacherConfig, Teacher]],
        scorer: PolicyScorer,
        settings: ReplaySettings,
        cap: SpendingCap,
        concurrency: int,
        emit: Callable[[PreferencePair], None],
        max_failures_in_a_row: int | None = None,
    ) -> None:
        self._teachers = teachers
        self._scorer = scorer
        self._settings = settings
        self._cap = cap
        self._calls = asyncio.Semaphore(concurrency)
        # steps in flight, so that a step's latency is its teachers' answer time, not our own queue
        self._step_slots = asyncio.Semaphore(max(1, concurrency // len(teachers)))
        self._scoring = asyncio.Lock()
        self._emit = emit
        self._tallies = {config.name: TeacherTally() for config, _ in teachers}
        self._traces: list[TraceTally] = []
        self._step_latencies: list[float] = []
        self._calls_saved = 0
        self._max_failures_in_a_row = max_failures_in_a_row
        self._failures_in_a_row: Counter[str] = Counter()
        self.stopped_by_budget = False
        self.stopped_by_teacher: str | None = None

    async def run(self, traces: Iterable[EpisodeTrace], on_step: Callable[[], None] | None = None) -> ReplayReport:
        """Replay every trace in order (the turns of one trace concurrently) until done or out of budget."""
        for trace in traces:
            tally = TraceTally(trace_id=trace.episode_id, task_id=trace.task_id, steps=len(trace.steps))
            self._traces.append(tally)
            steps = turn_starts(trace)
            results = await asyncio.gather(*(self._replay_step(trace, step, tally, on_step) for step in steps))
            for pair in results:
                if pair is not None:
                    self._emit(pair)
        return self.report()

    async def _replay_step(
        self, trace: EpisodeTrace, step: StepTrace, tally: TraceTally, on_step: Callable[[], None] | None
    ) -> PreferencePair | None:
        try:
            decision, pair = await self._decide(trace, step, tally)
        finally:
            if on_step:
                on_step()
        tally.decisions[decision.outcome] += 1
        return pair

    async def _decide(
        self, trace: EpisodeTrace, step: StepTrace, tally: TraceTally
    ) -> tuple[StepDecision, PreferencePair | None]:
        if self.stopped_by_budget:
            return StepDecision(Outcome.BUDGET_EXHAUSTED), None
        if self.stopped_by_teacher:
            return StepDecision(Outcome.TEACHER_STOPPED), None
        messages = transcript(trace, before_step=step.index)
        raw_text = step.action.metadata.get(ASSISTANT_TEXT_KEY) or format_tool_call(step.action)
        if self._settings.entropy_threshold is not None:
            # the gate reads the student's uncertainty on the turn it really wrote
            if (await self._score(messages, raw_text)).mean_entropy <= self._settings.entropy_threshold:
                self._calls_saved += len(self._teachers)
                return StepDecision(Outcome.GATED_OUT), None
        votes = await self._ask_teachers(messages, tally)
        if votes is None:
            return StepDecision(Outcome.TEACHER_STOPPED if self.stopped_by_teacher else Outcome.BUDGET_EXHAUSTED), None
        decision = decide_step(step.action, votes, self._settings.min_agreement)
        if decision.outcome is not Outcome.PAIR:
            return decision, None
        assert decision.chosen is not None
        # Both sides in the canonical one-call form, so that the pair prefers one action over another and not
        # tidy JSON over prose and extra calls; a turn with no parseable call has no other form than its text.
        chosen_text = format_tool_call(decision.chosen)
        rejected_text = raw_text if PARSE_ERROR_KEY in step.action.metadata else format_tool_call(step.action)
        chosen_score = await self._score(messages, chosen_text)
        rejected_score = await self._score(messages, rejected_text)
        pair = PreferencePair(
            trace_id=trace.episode_id,
            task_id=trace.task_id,
            step_index=step.index,
            context=[ChatMessage(role=m["role"], content=m["content"]) for m in messages],
            chosen=decision.chosen,
            rejected=step.action,
            chosen_text=chosen_text,
            rejected_text=rejected_text,
            reference_chosen_logp=chosen_score.logp,
            reference_rejected_logp=rejected_score.logp,
            chosen_tokens=chosen_score.tokens,
            rejected_tokens=rejected_score.tokens,
            reference_policy=self._scorer.name,
            reference_weights=self._scorer.weights,
            reference_dtype=self._scorer.dtype,
            teachers=decision.teachers,
            agreement=decision.agreement,
        )
        return decision, pair

    async def _score(self, messages: list[dict[str, str]], text: str) -> ActionScore:
        async with self._scoring:
            return await asyncio.to_thread(self._scorer.score, messages, text)

    async def _ask_teachers(self, messages: list[dict[str, str]], tally: TraceTally) -> list[TeacherVote] | None:
        """Every teacher's vote, or None when the cap leaves no room for this step's calls."""
        async with self._step_slots:
            if self.stopped_by_budget or self.stopped_by_teacher:
                return None
            reservations: list[Reservation] = []
            try:
                for config, _ in self._teachers:
                    reservations.append(self._cap.reserve(worst_case_cost_usd(config, messages)))
            except BudgetExhausted as error:
                for reservation in reservations:
                    self._cap.settle(reservation, 0.0)
                if not self.stopped_by_budget:
                    log.warning("%s", error)
                self.stopped_by_budget = True
                return None
            started = time.monotonic()
            votes = await asyncio.gather(
                *(
                    self._ask_one(config, teacher, messages, reservation, tally)
                    for (config, teacher), reservation in zip(self._teachers, reservations)
                )
            )
            self._step_latencies.append(time.monotonic() - started)
            for vote in votes:
                self._count_failure(vote)
            return list(votes)

    def _count_failure(self, vote: TeacherVote) -> None:
        """Stop asking once a teacher has failed `max_failures_in_a_row` calls running (its votes alone void a step)."""
        self._failures_in_a_row[vote.teacher] = self._failures_in_a_row[vote.teacher] + 1 if vote.error else 0
        limit = self._max_failures_in_a_row
        if limit is not None and self._failures_in_a_row[vote.teacher] >= limit and not self.stopped_by_teacher:
            self.stopped_by_teacher = (
                f"teacher {vote.teacher!r} failed {limit} calls in a row (the last: {vote.error}); fix it or take it "
                "out of the teachers file, then replay again"
            )
            log.warning("%s", self.stopped_by_teacher)

    async def _ask_one(
        self,
        config: TeacherConfig,
        teacher: Teacher,
        messages: list[dict[str, str]],
        reservation: Reservation,
        tally: TraceTally,
    ) -> TeacherVote:
        teacher_tally = self._tallies[config.name]
        teacher_tally.calls += 1
        async with self._calls:
            try:
                reply = await teacher.complete(messages)
            except TeacherError as error:
                self._cap.settle(reservation, 0.0)
                teacher_tally.errors[error.kind] += 1
                log.info("%s", error)
                return TeacherVote(teacher=config.name, error=str(error))
        self._cap.settle(reservation, reply.cost_usd)
        teacher_tally.answered += 1
        teacher_tally.cost_usd += reply.cost_usd
        teacher_tally.input_tokens += reply.input_tokens
        teacher_tally.output_tokens += reply.output_tokens
        teacher_tally.latencies.append(reply.latency_s)
        tally.cost_usd += reply.cost_usd
        parsed = parse_tool_calls(reply.text)[0]
        if parsed.error is not None:
            teacher_tally.errors["unparseable"] += 1
            return TeacherVote(teacher=config.name, error=f"unparseable reply: {parsed.error}")
        return TeacherVote(teacher=config.name, action=parsed.call)

    def report(self) -> ReplayReport:
        """The report of everything replayed so far."""
        decisions: Counter = Counter()
        for trace in self._traces:
            decisions.update(trace.decisions)
        return ReplayReport(
            traces=[trace.stats() for trace in self._traces],
            decisions={outcome.value: decisions[outcome] for outcome in Outcome},
            pairs=decisions[Outcome.PAIR],
            cost_usd=self._cap.spent_usd,
            teacher_calls=sum(t.calls for t in self._tallies.values()),
            calls_saved_by_gating=self._calls_saved,
            step_latency=summarize_latency(self._step_latencies),
            teachers={name: tally.stats() for name, tally in self._tallies.items()},
            stopped_by_budget=self.stopped_by_budget,
            stopped_by_teacher=self.stopped_by_teacher,
            min_agreement=self._settings.min_agreement,
            entropy_threshold=self._settings.entropy_threshold,
            max_cost_usd=self._cap.cap_usd,
        )
