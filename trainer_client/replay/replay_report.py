"""The JSON report of one replay run: decisions, cost, latency, errors and pairs, per trace and per teacher."""

import statistics
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from trainer_client.replay.pair_decision import Outcome


class LatencySummary(BaseModel):
    """p50 and p95 of a list of durations in seconds (None when there are none)."""

    count: int
    p50_s: float | None
    p95_s: float | None


class TeacherStats(BaseModel):
    """One teacher over the whole run."""

    calls: int
    answered: int
    errors: dict[str, int] = Field(description="Failed calls by kind (timeout, http_503, unparseable, ...).")
    cost_usd: float
    input_tokens: int
    output_tokens: int
    latency: LatencySummary


class TraceStats(BaseModel):
    """One replayed trace."""

    trace_id: str
    task_id: str
    steps: int
    decision_points: int = Field(description="Turn starts: the steps where the student chose freely.")
    decisions: dict[str, int]
    pairs: int
    cost_usd: float


class ReplayReport(BaseModel):
    """Everything `regrow replay` measured; written as JSON next to the pairs."""

    traces: list[TraceStats]
    decisions: dict[str, int] = Field(description="Every decision point by outcome, all traces.")
    pairs: int
    cost_usd: float
    teacher_calls: int
    calls_saved_by_gating: int
    step_latency: LatencySummary = Field(description="Per decision point: from first teacher call to last answer.")
    teachers: dict[str, TeacherStats]
    stopped_by_budget: bool
    stopped_by_teacher: str | None = Field(
        default=None, description="Why the run stopped asking: a teacher that failed too many calls in a row."
    )
    min_agreement: float
    entropy_threshold: float | None
    max_cost_usd: float | None


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolated between ranks as `statistics.quantiles` does; None for none."""
    if not values:
        return None
    if len(values) == 1 or q <= 0:
        return min(values)
    if q >= 100:
        return max(values)
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 10) - 1]


def summarize_latency(values: list[float]) -> LatencySummary:
    return LatencySummary(count=len(values), p50_s=percentile(values, 50), p95_s=percentile(values, 95))


@dataclass
class TeacherTally:
    """Running counts for one teacher."""

    calls: int = 0
    answered: int = 0
    errors: Counter = field(default_factory=Counter)
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    latencies: list[float] = field(default_factory=list)

    def stats(self) -> TeacherStats:
        return TeacherStats(
            calls=self.calls,
            answered=self.answered,
            errors=dict(self.errors),
            cost_usd=self.cost_usd,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            latency=summarize_latency(self.latencies),
        )


@dataclass
class TraceTally:
    """Running counts for one trace."""

    trace_id: str
    task_id: str
    steps: int
    decisions: Counter = field(default_factory=Counter)
    cost_usd: float = 0.0

    def stats(self) -> TraceStats:
        return TraceStats(
            trace_id=self.trace_id,
            task_id=self.task_id,
            steps=self.steps,
            decision_points=sum(self.decisions.values()),
            decisions={outcome.value: self.decisions[outcome] for outcome in Outcome},
            pairs=self.decisions[Outcome.PAIR],
            cost_usd=self.cost_usd,
        )
