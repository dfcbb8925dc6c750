"""The swarm stack end to end on this engine: `docker swarm init`, `regrow stack deploy`, an episode through the
published port, `regrow stack traces`, `regrow stack rm`, `docker swarm leave --force`, and nothing left behind.

deploy/swarm.yaml runs its services in global mode, so the same file serves a many-node swarm unchanged; this test has
one node, the local engine, advertised on 127.0.0.1 so that no traffic leaves the machine.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.compose_stack import REPO, output_tail
from tests.live_process import free_port
from tests.task_fixture import DEMO_TASK_ID, SOLUTION_PATCH, build_demo_task_store

# Deploying waits up to 20 min for /health on a heavily loaded machine: more than the suite's 900 s per test.
TINYCALC = Path(__file__).parent / "fixtures" / "tinycalc"
pytestmark = [pytest.mark.docker, pytest.mark.timeout(3000)]

REGROW = str(Path(sys.executable).parent / "regrow")
NAMESPACE_LABEL = "com.docker.stack.namespace"
# Networks a swarm init makes on the engine; the test removes the ones it made.
SWARM_NETWORKS = ("docker_gwbridge", "ingress")


def docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def regrow(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([REGROW, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def swarm_state() -> str:
    return docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()


def network_names() -> set[str]:
    return set(docker("network", "ls", "--format", "{{.Name}}").stdout.split())


def labelled(kind: list[str], name: str) -> list[str]:
    return docker(*kind, "--filter", f"label={NAMESPACE_LABEL}={name}").stdout.split()


def stack_containers(name: str) -> list[str]:
    return labelled(["ps", "-aq", "--no-trunc"], name)


def until(check, timeout: float, what: str, poll: float = 2.0):
    """Poll `check` until it returns something truthy; the machine may be heavily loaded, so deadlines are generous."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"{what} after {timeout:.0f} s"
        time.sleep(poll)
    return result


def _service_image() -> str:
    """regrow/app as the compose tests build it: the same wheelhouse and build, so an up-to-date image is reused."""
    made = subprocess.run(["make", "app-image"], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, f"make app-image failed:\n{output_tail(made)}"
    return "regrow/app:0.1.0"


def _readable_store(docker_backend, base_image) -> Path:
    """The hand-made one-task store, in a directory the services' `agent` user can read through the bind mount."""
    root = Path(tempfile.mkdtemp(prefix="regrow-swarm-"))
    root.chmod(0o755)
    try:
        store = build_demo_task_store(docker_backend, base_image, root / "tasks")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    for path in [store, *store.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return store


def _teardown(name: str, initialised: bool, networks_before: set[str]) -> list[str]:
    """Remove the stack and, if this test made the swarm, leave it; returns what went wrong (teardown never raises)."""
    problems = []
    if swarm_state() == "active" and (labelled(["service", "ls", "-q"], name) or stack_containers(name)):
        removed = regrow("stack", "rm", "--name", name, "--volumes", "--timeout", "600")
        if removed.returncode != 0:
            problems.append(f"regrow stack rm: {output_tail(removed)}")
            docker("stack", "rm", name)
    if initialised and swarm_state() != "inactive":
        left = docker("swarm", "leave", "--force")
        if left.returncode != 0:
            problems.append(f"docker swarm leave --force: {left.stderr}")
    if initialised:
        for network in SWARM_NETWORKS:
            # the engine lets go of docker_gwbridge only once its last swarm endpoint is gone
            deadline = time.monotonic() + 120
            while network in network_names() - networks_before and time.monotonic() < deadline:
                docker("network", "rm", network)
                time.sleep(2)
    for container in stack_containers(name):
        docker("rm", "-f", container)
    for volume in labelled(["volume", "ls", "-q"], name):
        docker("volume", "rm", "-f", volume)
    return problems


@pytest.fixture(scope="module")
def swarm(docker_backend, base_image):
    """A one-node swarm (made here unless the engine already is in one) running the stack on free ports."""
    # REGROW_APP_IMAGE runs the stack on an image built elsewhere (another checkout's code) instead of building this one
    image = os.environ.get("REGROW_APP_IMAGE") or _service_image()
    store = _readable_store(docker_backend, base_image)
    name = f"regrowswarm{os.getpid()}"
    http_port, grpc_port = free_port(), free_port()
    networks_before = network_names()
    state = swarm_state()
    assert state in ("inactive", "active"), f"the engine's swarm state is {state!r}: leave or repair it first"
    initialised = state == "inactive"
    started = time.monotonic()
    info: dict | None = None
    try:
        if initialised:
            made = docker("swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377")
            assert made.returncode == 0, f"docker swarm init failed: {made.stderr}"
        deployed = regrow(
            "stack",
            "deploy",
            "--tasks",
            str(store),
            "--name",
            name,
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--image",
            image,
            "--timeout",
            "1200",
            timeout=1500,
        )
        logs = docker("service", "logs", "--tail", "40", f"{name}_env-server").stdout
        assert deployed.returncode == 0, f"regrow stack deploy failed:\n{output_tail(deployed)}\n{logs}"
        info = {
            "name": name,
            "url": f"http://127.0.0.1:{http_port}",
            "store": store,
            "initialised": initialised,
            "networks_before": networks_before,
            "servers": set(stack_containers(name)),
            "started": started,
            "image": image,
        }
        yield info
    finally:
        servers = set(stack_containers(name)) | (info["servers"] if info else set())
        problems = _teardown(name, initialised, networks_before)
        for server in servers:  # what a failed test left: sandboxes of the stack's servers
            for sandbox in docker("ps", "-aq", "--filter", f"label=regrow.owner.container={server}").stdout.split():
                docker("rm", "-f", sandbox)
        shutil.rmtree(store.parent, ignore_errors=True)
        assert not problems, problems


def test_each_node_runs_one_env_server_and_one_proxy(swarm):
    name = swarm["name"]
    expected = [f"{name}_docker-proxy global 1/1", f"{name}_env-server global 1/1"]
    line_format = "{{.Name}} {{.Mode}} {{.Replicas}}"

    def services() -> list[str]:
        listed = docker("service", "ls", "--filter", f"label={NAMESPACE_LABEL}={name}", "--format", line_format)
        return sorted(listed.stdout.splitlines())

    # a task counts once its container's own healthcheck has passed, a few seconds after /health answers
    until(lambda: services() == expected or None, 300, f"the services are not both global 1/1: {services()}")


def test_only_the_proxy_holds_the_engine_socket(swarm):
    for container in swarm["servers"]:
        inspected = json.loads(docker("inspect", container).stdout)[0]
        service = inspected["Config"]["Labels"]["com.docker.swarm.service.name"]
        sources = {mount.get("Source") for mount in inspected["Mounts"]}
        assert ("/var/run/docker.sock" in sources) == service.endswith("_docker-proxy"), (service, sources)


def test_a_plain_http_episode_through_the_published_port_scores_one(swarm):
    with httpx.Client(base_url=swarm["url"], timeout=600) as http:
        reset = http.post("/reset", json={"task_id": DEMO_TASK_ID})
        assert reset.status_code == 200, reset.text
        episode_id = reset.json()["metadata"]["episode_id"]
        command = f"git apply <<'REGROW_PATCH_END'\n{SOLUTION_PATCH}REGROW_PATCH_END\n"
        applied = http.post(
            "/step", json={"episode_id": episode_id, "action": {"tool": "run", "args": {"command": command}}}
        )
        assert applied.status_code == 200 and applied.json()["observation"]["exit_code"] == 0, applied.text
        final = http.post("/step", json={"episode_id": episode_id, "action": {"tool": "submit", "args": {}}})
    assert final.status_code == 200, final.text
    assert final.json()["done"] and final.json()["reward"] == 1.0, final.text
    swarm["episode_id"] = episode_id


def test_stack_traces_gathers_every_nodes_episodes_into_one_jsonl(swarm, tmp_path):
    out = tmp_path / "traces.jsonl"
    gathered = regrow("stack", "traces", "--out", str(out), "--http-port", swarm["url"].rsplit(":", 1)[1])
    assert gathered.returncode == 0, output_tail(gathered)
    episodes = {trace["episode_id"]: trace for trace in map(json.loads, out.read_text().splitlines())}
    played = episodes[swarm["episode_id"]]
    assert played["reward"] == 1.0 and [step["action"]["tool"] for step in played["steps"]] == ["run", "submit"]


def _first_try_container(service: str) -> str | None:
    running = docker("ps", "-q", "--no-trunc", "--filter", f"label=com.docker.swarm.service.name={service}")
    return (running.stdout.split() or [None])[0]


def test_stack_synth_runs_a_job_per_repository_retries_a_killed_one_and_merges_each_task_once(swarm, docker_backend):
    """Two repositories as two Swarm jobs on this node; one job's container is killed after its first task is
    written, the swarm starts it again, the new try goes on from the shard's journal, and the merge has every task
    once. Nothing of the jobs is left: no service, no sandbox of the killed try."""
    from regrow.stack.synth_jobs import plan_jobs
    from sandbox.lifecycle.owner import OWNER_CONTAINER_LABEL

    root = Path(tempfile.mkdtemp(prefix="regrow-synth-jobs-"))
    root.chmod(0o755)
    try:
        sources = []
        for name in ("alpha", "beta"):  # one library under two names: two repositories, two sets of task ids
            copy = root / "repos" / f"tinycalc-{name}"
            shutil.copytree(TINYCALC, copy)  # the jobs are what is tested: the smallest repository that gives tasks
            for path in [copy.parent, copy, *copy.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            sources.append(str(copy))
        repos = root / "repos.txt"
        repos.write_text("".join(f"{source}\n" for source in sources))
        batch = f"regrowsynth{os.getpid()}"
        killed_job = plan_jobs([(sources[0], None)], batch, root / "shards")[0]
        command = [REGROW, "stack", "synth", "--repos", str(repos), "--shards", str(root / "shards")]
        command += ["--out", str(root / "merged"), "--name", batch, "--image", swarm["image"], "--max-tasks", "2"]
        command += ["--timeout", "2400"]
        with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
            tasks = killed_job.shard / "tasks.jsonl"
            until(lambda: (tasks.is_file() and tasks.read_text().strip()) or run.poll() is not None, 1800, "no task")
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
            killed = _first_try_container(killed_job.service)
            assert killed is not None
            assert docker("kill", killed).returncode == 0
            output, _ = run.communicate(timeout=2700)
        assert run.returncode == 0, output[-3000:]
        merged = [json.loads(line) for line in (root / "merged" / "tasks.jsonl").read_text().splitlines()]
        ids = [record["instance_id"] for record in merged]
        assert len(ids) == len(set(ids)) == 4, ids
        assert {record["repo"] for record in merged} == {"tinycalc-alpha", "tinycalc-beta"}
        assert "judged by an earlier run" in (killed_job.shard / "synth.log").read_text()  # the retry went on
        assert "merged 2 shard(s)" in output, output[-3000:]
        assert docker("service", "ls", "-q", "--filter", f"label=regrow.synth.batch={batch}").stdout.split() == []
        left = [
            c["Id"]
            for c in docker_backend.managed_containers()
            if (c.get("Labels") or {}).get(OWNER_CONTAINER_LABEL) == killed
        ]
        assert left == []
        again = regrow(
            "tasks",
            "merge",
            *(str(p) for p in (root / "shards").iterdir() if p.is_dir()),
            "--out",
            str(root / "merged"),
        )
        assert again.returncode == 0 and len((root / "merged" / "tasks.jsonl").read_text().splitlines()) == 4
    finally:
        for service in docker("service", "ls", "-q", "--filter", f"label=regrow.synth.batch={batch}").stdout.split():
            docker("service", "rm", service)
        shutil.rmtree(root, ignore_errors=True)


def test_stack_rm_and_swarm_leave_leave_nothing_behind(swarm, docker_backend):
    from sandbox.lifecycle.owner import OWNER_CONTAINER_LABEL

    name = swarm["name"]
    servers = swarm["servers"] | set(stack_containers(name))
    service = f"label=com.docker.swarm.service.name={name}_env-server"
    server = docker("ps", "-q", "--no-trunc", "--filter", service).stdout.split()[0]  # the running one
    image = json.loads((swarm["store"] / "tasks.jsonl").read_text().splitlines()[0])["image"]
    # What a server SIGKILLed past its stop grace period leaves: a sandbox labelled with its container, still running
    left_behind = docker_backend.create(image, labels={OWNER_CONTAINER_LABEL: server}).id
    removed = regrow("stack", "rm", "--name", name, "--volumes", "--timeout", "600")
    assert removed.returncode == 0, output_tail(removed)
    # Gone, by stack rm or by a test beside this one, whose reaper takes it once its server stops (the count is
    # tested on its own in tests/regrow/test_stack_cli.py).
    assert not docker_backend.container_running(left_behind), (
        server,
        removed.stderr,
        docker("inspect", "--format", "{{json .Config.Labels}}", left_behind).stdout,
    )
    problems = _teardown(name, swarm["initialised"], swarm["networks_before"])
    assert not problems, problems
    left = [f"container {c[:12]}" for c in stack_containers(name)]
    left += [f"volume {v}" for v in docker("volume", "ls", "-q").stdout.split() if v.startswith(f"{name}_")]
    left += [f"network {n}" for n in network_names() if n.startswith(f"{name}_")]
    left += [
        f"sandbox {sandbox['Id'][:12]}"
        for sandbox in docker_backend.managed_containers()
        if (sandbox.get("Labels") or {}).get(OWNER_CONTAINER_LABEL) in servers
    ]
    if swarm["initialised"]:
        assert swarm_state() == "inactive"
        left += [f"network {n}" for n in (network_names() - swarm["networks_before"]) & set(SWARM_NETWORKS)]
    assert left == []
    print(f"swarm stack: deploy to nothing left in {time.monotonic() - swarm['started']:.0f} s")
