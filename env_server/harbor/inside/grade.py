"""The verifier of an exported task: /tests/test.sh runs this with the task image's Python, in Harbor's separate
verifier container (a fresh one of the task's image, the agent's /workspace copied in).

1. Before any code of the submission runs, /tests becomes root's alone: its checks.json holds the original's
   outcomes, which no process that runs the submission may read. Those processes run as another uid, and every
   process of that uid dies after each run.
2. Every file of /workspace that differs from the task's own (its original workspace ships in /tests, so nothing the
   agent did to .git can hide a change) is kept only where regrow's path policy grades it: pristine tests, test and
   build configuration, start-up hooks, metadata and new top-level modules go back to the original.
3. The checks, as regrow's server runs them: its check child replays each recorded call in a process of its own with
   the workspace as cwd, each outcome on a channel of its own; then its test child runs FAIL_TO_PASS and
   PASS_TO_PASS under the task's test command and hash seed, plugin autoload off.
4. regrow's own judging (checks.judge_all, verdict.score, shipped unchanged under /tests/grader) judges the outcomes
   against checks.json and scores unit by unit: the report only takes credit away, and a unit with no secret
   evidence leaves the task without a score (0). /logs/verifier/reward.json gets the reward and its parts as
   numbers (Harbor reads numbers only), grading.json beside it the details.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "grader"))
# regrow's own modules, shipped beside this file; proto's wire models are stand-ins (wire_standins.py)
from env_server.grading.checks import check_inputs, judge_all
from env_server.grading.inside.launcher import CHILDREN, collect
from env_server.grading.path_policy import PathPolicy
from env_server.grading.pytest_command import GRADING_ENV, PYTEST_CONFIGS, pytest_arguments, pytest_config
from env_server.grading.verdict import RunReport, score
from proto.tasks import DeletedUnit, IoCheck, TaskRecord

# Harbor's paths, and the uid that runs the submission; the variables let a test run this verifier on folders of its
# own (an empty REGROW_VERIFIER_UID: as itself)
TESTS = os.environ.get("REGROW_VERIFIER_TESTS", "/tests")
WORKSPACE = os.environ.get("REGROW_VERIFIER_WORKSPACE", "/workspace")
REWARD = os.environ.get("REGROW_VERIFIER_REWARD", "/logs/verifier/reward.json")
SUBMISSION_UID = os.environ.get("REGROW_VERIFIER_UID", "65534")  # nobody: no process of Harbor's runs as it


def files_under(root):
    """Every file and every link (to a file or a folder; a linked folder is not entered) under `root`, by path."""
    found = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not (folder == root and d == ".git")]
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        for name in names + links:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = path
    return found


def digest(path):
    if os.path.islink(path):
        return "link:" + os.readlink(path)
    with open(path, "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()


def restore_refused(task, original_root):
    """Put back every change the path policy does not grade; returns [(path, why)]."""
    original, now = files_under(original_root), files_under(WORKSPACE)
    policy = PathPolicy.for_task(task["test_files"], task["deleted_paths"], set(original))
    reverted = []
    for path in sorted(set(original) | set(now)):
        if path in original and path in now and digest(original[path]) == digest(now[path]):
            continue
        why = policy.refusal(path, is_new=path not in original)
        if why is None and path in now and os.path.islink(now[path]):
            why = "a new or changed link can point the tests anywhere"
        if why is None:
            continue
        target = os.path.join(WORKSPACE, path)
        if os.path.lexists(target):
            os.remove(target)  # a link, to a folder too, goes as the link, never what it points to
        if path in original:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(original[path], target, follow_symlinks=False)
        reverted.append((path, why))
    return reverted


def submission_uid():
    """The uid the submission's processes run as: another than this root process's, else None (run as itself)."""
    if not SUBMISSION_UID or os.geteuid() != 0 or int(SUBMISSION_UID) == 0:
        return None
    return int(SUBMISSION_UID)


def hand_over(uid, shared):
    """/tests made root's alone; the workspace and a home in `shared` made the submission's uid's (its own tests may
    write there, as they did at synthesis); returns the home."""
    home = os.path.join(shared, "home")
    os.mkdir(home)
    if uid is None:
        return home
    os.chown(TESTS, 0, 0)
    os.chmod(TESTS, 0o700)
    os.chmod(shared, 0o755)
    for folder, dirs, names in os.walk(WORKSPACE):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + names)]:
            os.lchown(name, uid, uid)
    os.chown(home, uid, uid)
    return home


def end_processes(group, uid):
    """Kill the child's process group and, with a uid of its own, every process of that uid however it left the
    group: nothing the submission started outlives its run to touch the next one or the reward."""
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    if uid is None:
        return
    helper = os.fork()
    if helper == 0:  # kill(-1) as that uid reaches all of its processes at once, leaving none to fork again
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def records_of(lines):
    found = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def run_child(kind, config, shared, env, uid):
    """One of regrow's child programs ("checks" or "tests") in the workspace, as the submission's uid, its lines read
    from the pipe handed to it alone; (records, error, child exit) as regrow's launcher reports them."""
    config_path = os.path.join(shared, f"{kind}.json")
    with open(config_path, "w", encoding="utf-8") as file:
        json.dump(config, file)
    read_end, write_end = os.pipe()
    as_uid = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    child = subprocess.Popen(
        [sys.executable, "-P", os.path.join(shared, CHILDREN[kind]), config_path, str(write_end)],
        pass_fds=(write_end,),
        stdin=subprocess.DEVNULL,
        cwd=WORKSPACE,
        env=env,
        start_new_session=True,
        **as_uid,
    )
    os.close(write_end)
    lines, overflow, timed_out = collect(child, read_end, time.monotonic() + config["timeout_s"])
    os.close(read_end)
    end_processes(child.pid, uid)
    records = records_of(lines)
    if timed_out:
        return records, f"the {kind} ran past {config['timeout_s']:g}s", child.returncode
    if overflow:
        return records, f"the {kind} sent more than the verifier keeps", child.returncode
    if not records:
        return [], f"the {kind} child sent nothing (exit {child.returncode})", child.returncode
    return records, None, child.returncode


def plugin_modules(task, shared):
    """The image's pytest plugins, named one by one since autoload is off: the task's record, else the image's."""
    if task["pytest_plugins"] is not None:
        return task["pytest_plugins"]
    probe = os.path.join(shared, "pytest_plugin_modules.py")
    found = subprocess.run([sys.executable, "-I", probe], capture_output=True, text=True, cwd="/", timeout=60)
    return found.stdout.split() if found.returncode == 0 else []


def pytest_child_config(task, original_root, shared):
    """The test child's config: regrow's grader's pytest arguments, rooted at this workspace, and the wanted tests."""
    configs = {}
    for name, _ in PYTEST_CONFIGS:
        if os.path.isfile(os.path.join(original_root, name)):
            with open(os.path.join(original_root, name), "rb") as file:
                configs[name] = file.read()
    wanted = sorted({*task["FAIL_TO_PASS"], *task["PASS_TO_PASS"]})
    paths = sorted({nodeid.split("::")[0] for nodeid in wanted})
    arguments = pytest_arguments(task["test_command"], pytest_config(configs), plugin_modules(task, shared), paths)
    # regrow's grader runs in /workspace; a test may give this verifier a workspace elsewhere
    at = [a.replace("/workspace", WORKSPACE, 1) if a.startswith(("--rootdir=/workspace", "/workspace/")) else a
          for a in arguments]  # fmt: skip
    return {"arguments": at, "wanted": wanted, "timeout_s": task["timeout_s"]}


def ship_programs(shared):
    """regrow's child programs, copied where the submission's uid can read them (never /tests itself)."""
    programs = os.path.join(TESTS, "programs")
    for name in os.listdir(programs):
        shutil.copyfile(os.path.join(programs, name), os.path.join(shared, name))


def graded_run(task, checks, original_root, shared):
    """The checks, then the tests, each in a run of its own; the checks' frames and the test report."""
    uid = submission_uid()
    ship_programs(shared)
    tests_config = pytest_child_config(task, original_root, shared)  # its plugin probe runs before any submission code
    env = {**os.environ, **GRADING_ENV, "PYTHONHASHSEED": str(task["hash_seed"]), "HOME": hand_over(uid, shared)}
    frames = []
    if checks:  # no code of the submission has run yet
        calls = check_inputs(checks)
        config = {"calls": calls, "call_timeout_s": task["call_timeout_s"], "timeout_s": task["timeout_s"]}
        frames, _, _ = run_child("checks", config, shared, env, uid)
    return frames, RunReport.of(*run_child("tests", tests_config, shared, env, uid))


def write_outcome(path, content):
    """Write a file of the verifier's logs by replacing it: a link left there is replaced, never followed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".partial"
    if os.path.lexists(temporary):
        os.remove(temporary)
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(content, file, indent=1)
    os.replace(temporary, path)


def report(details, reverted):
    """reward.json (the reward and its parts, numbers only) and grading.json (what a person reads)."""
    parts = {
        "reward": details.reward,
        "units_credited": details.units_credited,
        "units_total": details.units_total,
        "secret_passed": details.hidden_passed,
        "secret_total": details.hidden_total,
        "basis_checks": int(details.basis == "checks"),  # 0: basis "undefined", a unit no secret check can judge
        "f2p_passed": details.f2p_passed,
        "f2p_total": details.f2p_total,
        "p2p_passed": details.p2p_passed,
        "p2p_total": details.p2p_total,
        "tampered": int(details.tampered),
        "reverted_paths": len(reverted),
    }
    more = {
        "basis": details.basis,
        "error": details.error,
        "tamper_reasons": list(details.tamper_reasons),
        "units": [vars(unit) for unit in details.units],
        "tests": [vars(test) for test in details.tests],
        "reverted": [{"path": path, "reason": why} for path, why in reverted],
    }
    write_outcome(REWARD, parts)
    write_outcome(os.path.join(os.path.dirname(REWARD), "grading.json"), {**parts, **more})
    print(json.dumps({**parts, "basis": details.basis, "error": details.error}))


def main():
    with open(os.path.join(TESTS, "task.json"), encoding="utf-8") as file:
        task = json.load(file)
    with open(os.path.join(TESTS, "checks.json"), encoding="utf-8") as file:
        checks = [IoCheck(**check) for check in json.load(file)]
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as shared:
        with tarfile.open(os.path.join(TESTS, "workspace.tar.gz")) as archive:
            # the extraction filter exists from Python 3.11.4 on; without one, tarfile keeps the archive's metadata
            archive.extractall(scratch, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        original_root = os.path.join(scratch, "workspace")
        reverted = restore_refused(task, original_root)
        for path, source in files_under(os.path.join(TESTS, "pristine")).items():  # the tests synthesis ran
            target = os.path.join(WORKSPACE, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
        frames, tests = graded_run(task, checks, original_root, shared)
    for path, why in reverted:
        print(f"not graded, put back: {path}: {why}")
    record = TaskRecord(
        FAIL_TO_PASS=task["FAIL_TO_PASS"],
        PASS_TO_PASS=task["PASS_TO_PASS"],
        deleted=[DeletedUnit(**unit) for unit in task["deleted_units"]],
    )
    report(score(record, tests, judge_all(checks, frames), task["reward_mode"]), reverted)


if __name__ == "__main__":
    main()
