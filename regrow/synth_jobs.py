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

import typer
from rich.table import Table

from regrow.output import console, fail
from regrow.swarm import StackError, check_manager, docker, ensure_image, remove_sandboxes_of

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


def synth_command(
    repos: Path = typer.Option(..., "--repos", exists=True, dir_okay=False, help="One repository per line."),
    shards: Path = typer.Option(
        ..., "--shards", help="Folder of the jobs' shards; the same absolute path on every node (shared, or not)."
    ),
    out: Path = typer.Option(..., "--out", help="The task store the shards are merged into."),
    name: str = typer.Option("regrow-synth", "--name", help="The batch's name: its services are NAME-<repository>."),
    image: str = typer.Option("regrow/app:0.1.0", "--image", help="Job image, built on every node."),
    max_tasks: int = typer.Option(10, "--max-tasks", min=1, help="Valid tasks per repository."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Candidates each job validates in parallel."),
    seed: int = typer.Option(0, "--seed"),
    modes: list[str] = typer.Option(["stub"], "--mode", help="Deletion mode; repeat for several."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE set in every job (REGROW_SYNTH_* settings)."),
    retries: int = typer.Option(3, "--retries", min=0, help="Tries after the first for a job that dies."),
    timeout: float = typer.Option(86400, "--timeout", help="Seconds to wait for every job."),
    keep: bool = typer.Option(False, "--keep", help="Leave the finished jobs' services in place."),
) -> None:
    """Synthesize every repository of REPOS as its own Swarm job, then merge the shards into OUT; rerun to go on."""
    from task_synth.batch import read_sources, read_state
    from task_synth.errors import SynthError
    from task_synth.store.store_merge import merge_stores

    try:
        check_manager()
        ensure_image(image, "run `make up` or `docker-compose build synth` on every node")
        variables = dict(item.split("=", 1) for item in env if "=" in item)
        if len(variables) != len(env):
            raise StackError(f"--env takes KEY=VALUE, got {[item for item in env if '=' not in item]}")
        planned = plan_jobs(read_sources(repos), name, shards.resolve())
        shards.mkdir(parents=True, exist_ok=True)
        shards.chmod(0o777)  # the jobs write as the image's `agent` user
        options = ["--max-tasks", str(max_tasks), "--jobs", str(jobs), "--seed", str(seed)]
        options += [word for mode in modes for word in ("--mode", mode)]
        for job in planned:
            create_job(job, name, image, options, variables, retries)
        console.print(f"{len(planned)} synth job(s) of batch {name} running; shards in {shards}")
        with console.status("waiting for the jobs...") as status:
            states = wait_jobs(planned, retries, timeout, lambda now: status.update(_waiting(now)))
        finished = [job.shard for job in planned if (job.shard / "tasks.jsonl").is_file()]
        merged = merge_stores(finished, out) if finished else None
        reaped = 0 if keep else remove_jobs(planned)
    except (StackError, SynthError) as error:
        fail(str(error))
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
    console.print(table)
    added = sum(merged.added.values()) if merged else 0
    console.print(f"merged {len(finished)} shard(s) into {out}: {added} new task(s)")
    if reaped:
        console.print(f"removed {reaped} sandbox(es) that killed tries left")


def _waiting(states: dict[str, JobState]) -> str:
    counts = {status: sum(state.status == status for state in states.values()) for status in ("done", "failed")}
    retried = sum(max(0, state.tries - 1) for state in states.values())
    return f"synth jobs: {counts['done']} done, {counts['failed']} failed of {len(states)} ({retried} retried)"
