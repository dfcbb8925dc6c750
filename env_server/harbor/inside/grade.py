"""The verifier of an exported task: /tests/test.sh runs this with the task image's Python, in Harbor's separate
verifier container (a fresh one of the task's image, the agent's /workspace copied in).

1. Every file of /workspace that differs from the task's own (its original workspace ships in /tests, so nothing the
   agent did to .git can hide a change) is kept only where regrow's path policy grades it: pristine tests, test and
   build configuration, start-up hooks, metadata and new top-level modules go back to the original.
2. FAIL_TO_PASS and PASS_TO_PASS run under the task's test command and hash seed.
3. The counterfactual, as regrow's grader runs it: the FAIL_TO_PASS tests that passed run again with each deleted
   unit put back as the task began (its stub, or nothing), the rest of the submission kept. A pass that survives it
   did not come from the unit and earns nothing.
4. The reward, as regrow's grader gives it on visible tests: the share of FAIL_TO_PASS credited when every
   PASS_TO_PASS test passes, else 0; written to /logs/verifier/reward.json with its parts.
"""

import ast
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from path_policy import PathPolicy  # regrow's own, shipped beside this file

# Harbor's paths; the variables let a test run this verifier on folders of its own
TESTS = os.environ.get("REGROW_VERIFIER_TESTS", "/tests")
WORKSPACE = os.environ.get("REGROW_VERIFIER_WORKSPACE", "/workspace")
REWARD = os.environ.get("REGROW_VERIFIER_REWARD", "/logs/verifier/reward.json")


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


def unit_lines(source, qualname):
    """The 1-based first and last line of the function or class `qualname` in `source` (decorators included)."""
    body = ast.parse(source).body
    node = None
    for name in qualname.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                     and n.name == name), None)  # fmt: skip
        if node is None:
            return None
        body = node.body
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return first, node.end_lineno


def put_units_back(units, original_root):
    """Each deleted unit of the submission replaced by its starting state; a whole module deleted: the file."""
    for path in sorted({unit["path"] for unit in units}):
        target, source = os.path.join(WORKSPACE, path), os.path.join(original_root, path)
        original = open(source, encoding="utf-8").read() if os.path.exists(source) else None
        qualnames = [unit["qualname"] for unit in units if unit["path"] == path and unit["kind"] != "module"]
        try:
            text = open(target, encoding="utf-8").read()
            lines = text.splitlines(keepends=True)
            for qualname in qualnames:
                span = unit_lines("".join(lines), qualname)
                if span is None:
                    continue  # the submission has no such unit: nothing of it to put back
                stub = unit_lines(original, qualname) if original is not None else None
                kept = original.splitlines(keepends=True)[stub[0] - 1 : stub[1]] if stub else []
                lines[span[0] - 1 : span[1]] = kept
            replaced = "".join(lines) if qualnames else original
        except (OSError, SyntaxError, UnicodeDecodeError):
            replaced = original  # no unit to find in a file that is gone or does not parse: the file as it began
        if os.path.lexists(target):
            os.remove(target)
        if replaced is not None:
            with open(target, "w", encoding="utf-8") as file:
                file.write(replaced)


def run_tests(task, outcomes_file, nodes):
    command = shlex.split(task["test_command"]) + ["-p", "outcomes_plugin", "-p", "no:cacheprovider", "-q", *nodes]
    env = dict(os.environ, PYTHONHASHSEED=str(task["hash_seed"]), REGROW_OUTCOMES=outcomes_file)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(TESTS, "plugin"), env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(command, cwd=WORKSPACE, env=env, timeout=task["timeout_s"])
        print(f"tests exited {done.returncode}")
    except subprocess.TimeoutExpired:
        print(f"tests timed out after {task['timeout_s']} s")
        return None
    if not os.path.exists(outcomes_file):  # pytest never finished its session
        return None
    with open(outcomes_file, encoding="utf-8") as file:
        return json.load(file)


def main():
    with open(os.path.join(TESTS, "task.json"), encoding="utf-8") as file:
        task = json.load(file)
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(os.path.join(TESTS, "workspace.tar.gz")) as archive:
            # the extraction filter exists from Python 3.11.4 on; without one, tarfile keeps the archive's metadata
            archive.extractall(scratch, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        reverted = restore_refused(task, os.path.join(scratch, "workspace"))
        pristine = os.path.join(TESTS, "pristine")
        for path, source in files_under(pristine).items():  # the tests as synthesis ran them, over the agent's
            target = os.path.join(WORKSPACE, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
        outcomes = run_tests(task, os.path.join(scratch, "outcomes.json"), task["FAIL_TO_PASS"] + task["PASS_TO_PASS"])
        passed = {node for node, outcome in (outcomes or {}).items() if outcome == "passed"}
        f2p_passed = [node for node in task["FAIL_TO_PASS"] if node in passed]
        credited = []
        if f2p_passed:
            put_units_back(task["deleted_units"], os.path.join(scratch, "workspace"))
            counter = run_tests(task, os.path.join(scratch, "counter.json"), f2p_passed)
            # a test the stub kept from being collected failed; a run that never finished credits nothing
            credited = [] if counter is None else [node for node in f2p_passed if counter.get(node) != "passed"]
            print(f"counterfactual: {len(credited)} of {len(f2p_passed)} passes fail with the stub back")
    for path, why in reverted:
        print(f"not graded, put back: {path}: {why}")
    p2p = sum(node in passed for node in task["PASS_TO_PASS"])
    intact = p2p == len(task["PASS_TO_PASS"])
    reward = len(credited) / len(task["FAIL_TO_PASS"]) if intact and task["FAIL_TO_PASS"] else 0.0
    parts = {
        "reward": reward,
        "f2p_passed": len(f2p_passed),
        "f2p_credited": len(credited),
        "f2p_total": len(task["FAIL_TO_PASS"]),
        "p2p_passed": p2p,
        "p2p_total": len(task["PASS_TO_PASS"]),
        "reverted_paths": len(reverted),
    }
    os.makedirs(os.path.dirname(REWARD), exist_ok=True)
    with open(REWARD, "w", encoding="utf-8") as file:
        json.dump(parts, file)
    print(json.dumps(parts))


if __name__ == "__main__":
    main()
