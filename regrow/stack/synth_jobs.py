"""`regrow stack synth`: one Docker Swarm job per repository of a repos file (`docker service create --mode
replicated-job`), each writing its own shard of a task store, joined by `regrow tasks merge` once every job has ended.

A job that dies (its container killed, its node gone) is started again by the swarm; the new run reads the shard's
journal and goes on where the dead one stopped. Where the shards folder is not shared between nodes, a retry on
another node starts a fresh shard; the merge takes each task id once, so nothing is counted twice either way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from pydantic import Field, FilePath
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.table import Table

from regrow.output import console, fail
from regrow.stack.swarm import StackError, check_manager, docker, ensure_image, remove_sandboxes_of
from task_synth.settings import Mode, SynthSettings

log = logging.getLogger(__name__)
BATCH_LABEL = "regrow.synth.batch"
# What `docker service ps` says of a job's tasks: finished for good, or a try that failed and may be retried.
DONE_STATES = ("complete",)
FAILED_STATES = ("failed", "rejected", "orphaned")


@dataclass(frozen=True)
class SynthJob:
    """One repository's job: the service that runs it and the shard (a task store) it writes."""

    source: str
    ref: str | None
    service: str
    shard: Path

    @property
    def repos_file(self) -> Path:
        """The one-line repos file the job reads (`regrow synth --repos` records the repository's outcome)."""
        return self.shard.with_suffix(".repos")


def shard_name(source: str, ref: str | None) -> str:
    """A name for the repository's shard and service, the same on every rerun: its last path part and a digest."""
    key = f"{source.rstrip('/')}@{ref}" if ref else source.rstrip("/")
    base = re.sub(r"[^a-z0-9]+", "-", Path(source.rstrip("/")).name.lower().removesuffix(".git")).strip("-")
    return f"{base[:30] or 'repo'}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def plan_jobs(sources: list[tuple[str, str | None]], batch: str, shards: Path) -> list[SynthJob]:
    """One job per repository; a service name is the batch's name and the shard's."""
    return [
        SynthJob(source, ref, f"{batch}-{name}"[:63], shards / name)
        for source, ref in sources
        for name in [shard_name(source, ref)]
    ]


def job_arguments(job: SynthJob, synth_options: list[str]) -> list[str]:
    """What the job's container runs after the image's `regrow` entrypoint."""
    return ["synth", "--repos", str(job.repos_file), "--out", str(job.shard), *synth_options]


def create_job(
    job: SynthJob, batch: str, image: str, synth_options: list[str], env: dict[str, str], retries: int
) -> None:
    """`docker service create` of one replicated job, unless the service is there from an earlier run."""
    if service_exists(job.service):
        log.info("%s: its job is there already", job.service)
        return
    job.repos_file.write_text(f"{job.source} {job.ref or ''}".strip() + "\n")
    gid = str(os.stat("/var/run/docker.sock").st_gid)
    mounts = ["type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock"]
    shards = job.shard.parent
    mounts.append(f"type=bind,source={shards},target={shards}")
    if Path(job.source).is_dir():  # a local repository: the same absolute path on every node, as the task store
        source = Path(job.source).resolve()
        mounts.append(f"type=bind,source={source},target={source},readonly")
    arguments = ["service", "create", "--detach", "--quiet", "--mode", "replicated-job", "--name", job.service]
    arguments += ["--label", f"{BATCH_LABEL}={batch}", "--user", f"agent:{gid}"]
    arguments += ["--restart-condition", "on-failure", "--restart-max-attempts", str(retries)]
    arguments += ["--restart-delay", "2s"]
    for mount in mounts:
        arguments += ["--mount", mount]
    for key, value in sorted(env.items()):
        arguments += ["--env", f"{key}={value}"]
    docker(*arguments, image, *job_arguments(job, synth_options), timeout=120)


def service_exists(name: str) -> bool:
    try:
        docker("service", "inspect", "--format", "{{.ID}}", name)
    except StackError:
        return False
    return True


@dataclass(frozen=True)
class JobState:
    """Where a job stands: done, failed for good (every try used), or still going; with its tries so far."""

    status: str  # "done", "failed" or "running"
    tries: int
    error: str = ""


def job_state(tasks: list[dict], retries: int) -> JobState:
    """The job's state from `docker service ps --format json` lines (one per try)."""
    states = [task.get("CurrentState", "").split(" ")[0].lower() for task in tasks]
    if any(state in DONE_STATES for state in states):
        return JobState("done", len(tasks))
    failed = [task for task, state in zip(tasks, states, strict=True) if state in FAILED_STATES]
    errors = [task.get("Error", "") for task in failed if task.get("Error")]
    if len(failed) > retries and len(failed) == len(tasks):
        return JobState("failed", len(tasks), errors[-1] if errors else "every try failed")
    return JobState("running", len(tasks), errors[-1] if errors else "")


def read_job(job: SynthJob, retries: int) -> JobState:
    lines = docker("service", "ps", "--no-trunc", "--format", "{{json .}}", job.service).splitlines()
    return job_state([json.loads(line) for line in lines if line.strip()], retries)


def job_containers(job: SynthJob) -> set[str]:
    """Every container the job's tries ran on this node, stopped ones included."""
    label = f"com.docker.swarm.service.name={job.service}"
    return set(docker("ps", "-aq", "--no-trunc", "--filter", f"label={label}").split())


def wait_jobs(jobs: list[SynthJob], retries: int, timeout_s: float, on_poll=None) -> dict[str, JobState]:
    """Poll every job until each is done or failed for good; StackError past `timeout_s`. Returns service -> state."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = {job.service: read_job(job, retries) for job in jobs}
        if on_poll:
            on_poll(states)
        if all(state.status != "running" for state in states.values()):
            return states
        if time.monotonic() > deadline:
            going = [service for service, state in states.items() if state.status == "running"]
            raise StackError(
                f"{len(going)} synth job(s) still running after {timeout_s:.0f} s ({', '.join(going)}): "
                "rerun the same command with a longer --timeout to wait on them"
            )
        time.sleep(2.0)


def remove_jobs(jobs: list[SynthJob]) -> int:
    """Remove the jobs' services and the sandboxes their killed tries left; returns how many sandboxes that was."""
    containers = set().union(*(job_containers(job) for job in jobs)) if jobs else set()
    services = [job.service for job in jobs if service_exists(job.service)]
    if services:
        docker("service", "rm", *services, timeout=120)
    deadline = time.monotonic() + 120
    while any(job_containers(job) for job in jobs) and time.monotonic() < deadline:
        time.sleep(1.0)
    return remove_sandboxes_of(containers)


def _as_in_synth(name: str) -> Any:
    """SynthSettings' own field `name`, its default, check and help: a job's `regrow synth` option is declared once."""
    return SynthSettings.model_fields[name]


class StackSynthSettings(BaseSettings):
    """What `regrow stack synth` runs: each repository of --repos as its own Swarm job, whose `regrow synth` takes
    --max-tasks, --jobs, --seed and --mode as `regrow synth` does, and where the shards and the merged store go."""

    model_config = SettingsConfigDict(env_prefix="REGROW_STACK_SYNTH_", cli_shortcuts={"modes": "mode"})

    repos: FilePath = Field(description="One repository per line.")
    shards: Path = Field(
        description="Folder of the jobs' shards; the same absolute path on every node (shared, or not)."
    )
    out: Path = Field(description="The task store the shards are merged into.")
    name: str = Field("regrow-synth", description="The batch's name: its services are NAME-<repository>.")
    image: str = Field("regrow/app:0.1.0", description="Job image, built on every node.")
    max_tasks: int = _as_in_synth("max_tasks")
    jobs: int = _as_in_synth("jobs")
    seed: int = _as_in_synth("seed")
    modes: list[Mode] = _as_in_synth("modes")
    env: list[str] = Field(default_factory=list, description="KEY=VALUE set in every job (REGROW_SYNTH_* settings).")
    retries: int = Field(3, ge=0, description="Tries after the first for a job that dies.")
    timeout: float = Field(86400, description="Seconds to wait for every job.")
    keep: bool = Field(False, description="Leave the finished jobs' services in place.")


def job_options(settings: StackSynthSettings) -> list[str]:
    """The options of each job's `regrow synth`, as it takes them."""
    options = ["--max-tasks", str(settings.max_tasks), "--jobs", str(settings.jobs), "--seed", str(settings.seed)]
    return options + [word for mode in settings.modes for word in ("--mode", mode)]


def synth_command(ctx: typer.Context) -> None:
    """Synthesize every repository of --repos as its own Swarm job, then merge the shards into --out; rerun to go on.

    Every option can also come from a REGROW_STACK_SYNTH_<OPTION> variable; a flag given here wins.
    """
    from regrow.settings_commands import settings_from_args

    run_synth_jobs(*settings_from_args(ctx, StackSynthSettings))


def run_synth_jobs(settings: StackSynthSettings) -> None:
    """Start the jobs (those of an earlier run stay), wait for them, merge their shards and say how each went."""
    from task_synth.errors import SynthError
    from task_synth.store.store_merge import merge_stores

    try:
        planned = start_jobs(settings)
        with console.status("waiting for the jobs...") as status:
            states = wait_jobs(planned, settings.retries, settings.timeout, lambda now: status.update(_waiting(now)))
        finished = [job.shard for job in planned if (job.shard / "tasks.jsonl").is_file()]
        merged = merge_stores(finished, settings.out) if finished else None
        reaped = 0 if settings.keep else remove_jobs(planned)
    except (StackError, SynthError) as error:
        fail(str(error))
    console.print(outcome_table(settings.repos, planned, states))
    added = sum(merged.added.values()) if merged else 0
    console.print(f"merged {len(finished)} shard(s) into {settings.out}: {added} new task(s)")
    if reaped:
        console.print(f"removed {reaped} sandbox(es) that killed tries left")


def start_jobs(settings: StackSynthSettings) -> list[SynthJob]:
    """Create one job per repository of the repos file (unless its service is there already)."""
    from task_synth.batch import read_sources

    check_manager()
    ensure_image(settings.image, "run `make up` or `make app-image` on every node")
    variables = dict(item.split("=", 1) for item in settings.env if "=" in item)
    if len(variables) != len(settings.env):
        raise StackError(f"--env takes KEY=VALUE, got {[item for item in settings.env if '=' not in item]}")
    shards = settings.shards
    planned = plan_jobs(read_sources(settings.repos), settings.name, shards.resolve())
    shards.mkdir(parents=True, exist_ok=True)
    shards.chmod(0o777)  # the jobs write as the image's `agent` user
    for job in planned:
        create_job(job, settings.name, settings.image, job_options(settings), variables, settings.retries)
    console.print(f"{len(planned)} synth job(s) of batch {settings.name} running; shards in {shards}")
    return planned


def outcome_table(repos: Path, planned: list[SynthJob], states: dict[str, JobState]) -> Table:
    """Each repository's job: its outcome as its shard's batch state has it, else the swarm's, with its tries."""
    from task_synth.batch import read_state

    table = Table(title=f"regrow stack synth {repos} ({len(planned)} repositories)")
    for column in ("repository", "job", "tries", "valid", "candidates", "error"):
        table.add_column(column)
    for job in planned:
        outcome = read_state(job.shard).get(f"{job.source}@{job.ref}" if job.ref else job.source)
        state = states[job.service]
        said = (outcome.error if outcome else "") or state.error
        table.add_row(
            job.source,
            outcome.status if outcome else state.status,
            str(state.tries),
            str(outcome.valid) if outcome else "",
            str(outcome.candidates) if outcome else "",
            said.splitlines()[0][:100] if said else "",
        )
    return table


def _waiting(states: dict[str, JobState]) -> str:
    counts = {status: sum(state.status == status for state in states.values()) for status in ("done", "failed")}
    retried = sum(max(0, state.tries - 1) for state in states.values())
    return f"synth jobs: {counts['done']} done, {counts['failed']} failed of {len(states)} ({retried} retried)"
