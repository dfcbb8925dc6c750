"""`regrow stack synth`'s own logic, no engine: job names, what a job runs, and when a job counts as done or failed
(the swarm end to end is in tests/test_swarm_stack.py)."""

from pathlib import Path

from regrow.stack.synth_jobs import JobState, job_arguments, job_state, plan_jobs, shard_name


def test_a_shard_is_named_the_same_on_every_rerun_and_differs_per_repository_and_ref():
    assert shard_name("/work/repos/h11", None) == shard_name("/work/repos/h11/", None)
    assert shard_name("/work/repos/h11", None).startswith("h11-")
    names = {shard_name("/a/h11", None), shard_name("/b/h11", None), shard_name("/a/h11", "v0.14.0")}
    assert len(names) == 3
    assert shard_name("https://example.org/Some_Repo.git", None).startswith("some-repo-")


def test_each_repository_gets_a_job_whose_service_name_docker_accepts(tmp_path: Path):
    sources = [("/work/repos/" + "x" * 80, None), ("/work/repos/h11", "main")]
    jobs = plan_jobs(sources, "regrow-synth", tmp_path)
    assert [job.source for job in jobs] == [source for source, _ in sources]
    assert all(len(job.service) <= 63 and job.service.startswith("regrow-synth-") for job in jobs)
    assert len({job.service for job in jobs}) == 2
    assert jobs[1].shard.parent == tmp_path and jobs[1].repos_file == jobs[1].shard.with_suffix(".repos")
    arguments = job_arguments(jobs[1], ["--max-tasks", "3"])
    assert arguments == ["synth", "--repos", str(jobs[1].repos_file), "--out", str(jobs[1].shard), "--max-tasks", "3"]


def _task(state: str, error: str = "") -> dict:
    return {"CurrentState": f"{state} 3 seconds ago", "Error": error}


def test_a_job_is_done_once_any_try_completes_even_after_a_killed_one():
    assert job_state([_task("Complete"), _task("Failed", "task: non-zero exit (137)")], retries=3) == JobState(
        "done", 2
    )


def test_a_killed_try_with_tries_left_is_still_running_and_says_why():
    state = job_state([_task("Failed", "task: non-zero exit (137)")], retries=3)
    assert state == JobState("running", 1, "task: non-zero exit (137)")
    assert job_state([_task("Running"), _task("Failed", "x")], retries=3).status == "running"
    assert job_state([], retries=3).status == "running"  # the swarm has not scheduled it yet


def test_a_job_fails_for_good_only_when_every_try_failed():
    tries = [_task("Failed", f"task: non-zero exit ({code})") for code in (1, 137)]
    assert job_state(tries, retries=1) == JobState("failed", 2, "task: non-zero exit (137)")
    assert job_state(tries, retries=2).status == "running"
    assert job_state([_task("Rejected", "no suitable node")], retries=0).status == "failed"
