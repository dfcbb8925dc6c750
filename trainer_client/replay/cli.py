"""`regrow replay`: turn recorded traces into DPO preference pairs by asking teacher models."""

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from trainer_client.replay.replay_report import ReplayReport
    from trainer_client.replay.replay_run import ReplaySettings

console = Console(stderr=True)


def replay(
    traces: Path = typer.Argument(
        ..., exists=True, dir_okay=False, help="EpisodeTrace JSONL from `regrow traces export`."
    ),
    teachers: Path = typer.Option(..., "--teachers", exists=True, dir_okay=False, help="teachers.yaml."),
    out: Path = typer.Option(..., "--out", help="Where to write the pairs (JSONL)."),
    policy: Path = typer.Option(
        ...,
        "--policy",
        exists=True,
        file_okay=False,
        help="HF folder of the policy you will train; it scores the reference logprobs.",
    ),
    min_agreement: float = typer.Option(0.5, min=0.0, max=1.0, help="Share of teachers that must agree on one action."),
    entropy_threshold: float | None = typer.Option(
        None, help="Ask teachers only where the student's mean token entropy (nats) exceeds this."
    ),
    report: Path | None = typer.Option(None, help="Report JSON path; default: OUT with .report.json."),
    device: str = typer.Option("cpu", help="Device of the policy model."),
) -> None:
    """Replay TRACES against the teachers and write (context, chosen, rejected) pairs with reference logprobs."""
    import asyncio
    import logging

    from trainer_client.replay.replay_run import ReplaySettings

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per teacher call would bury the progress bar

    report_path = report or out.with_suffix(".report.json")
    try:
        settings = ReplaySettings(min_agreement=min_agreement, entropy_threshold=entropy_threshold)
        result = asyncio.run(_run(traces, teachers, out, policy, settings, report_path, device))
    except ValueError as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from error
    ended = "stopped at the spending cap" if result.stopped_by_budget else "done"
    if result.stopped_by_teacher:
        ended = f"stopped: {result.stopped_by_teacher}"
    console.print(
        f"replay {ended}: {result.pairs} pairs from {len(result.traces)} traces, "
        f"{result.teacher_calls} teacher calls (saved {result.calls_saved_by_gating}), ${result.cost_usd:.4f}; "
        f"pairs in {out}, report in {report_path}"
    )


async def _run(
    traces_path: Path,
    teachers_path: Path,
    out: Path,
    policy: Path,
    settings: "ReplaySettings",
    report_path: Path,
    device: str,
) -> "ReplayReport":
    """Load everything, replay with a progress bar, and write the pairs and the report."""
    from rich.progress import Progress

    from trainer_client.channels.preference_pairs import PreferencePair
    from trainer_client.replay.policy_scorer import PolicyScorer
    from trainer_client.replay.replay_run import ReplayRun, read_traces, turn_starts
    from trainer_client.replay.spending import SpendingCap
    from trainer_client.replay.teachers import open_teacher
    from trainer_client.replay.teachers_config import load_teachers_file

    plan = load_teachers_file(teachers_path)
    traces = read_traces(traces_path)
    live = []
    try:
        with console.status("loading the policy and the teachers..."):
            scorer = PolicyScorer(policy, device=device)
            for config in plan.teachers:
                live.append((config, open_teacher(config)))
        with out.open("w", encoding="utf-8") as sink, Progress(console=console) as progress:
            task = progress.add_task("replaying turns", total=sum(len(turn_starts(t)) for t in traces))

            def emit(pair: PreferencePair) -> None:
                sink.write(pair.model_dump_json() + "\n")
                sink.flush()  # pairs found before a crash or the cap are kept

            cap = SpendingCap(plan.max_cost_usd)
            run = ReplayRun(live, scorer, settings, cap, plan.concurrency, emit, plan.max_failures_in_a_row)
            result = await run.run(traces, on_step=lambda: progress.advance(task))
    finally:
        for _, teacher in live:
            await teacher.aclose()
    report_path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return result


def register(app: typer.Typer) -> None:
    """Add `regrow replay` to the root command."""
    app.command("replay")(replay)
