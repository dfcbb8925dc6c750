"""What the in-memory sandbox answers in the env server tests: a scripted shell; Python and grading run on this host.

The memory sandbox runs no commands, so the script stands in for the launcher. It keeps the launcher's protocol (the
nonce read and emptied, the child's lines on a pipe, the report written back and signed with its digest) and runs the
real child programs the grader wrote into the sandbox, in a scratch copy of its workspace. It neither drops privileges
nor sweeps processes: a sweep on a shared host would kill other tests. The hardening stays on the real engine.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from env_server.grading.inside.launcher import CHILDREN, collect
from env_server.stepping.tools import TRACKED_RUN
from sandbox import ExecResult, SandboxFileNotFound
from sandbox.archive_extraction import extract_archive
from sandbox.layout import WORKSPACE
from sandbox.runtime.memory_sandbox import Command, MemorySandbox


def grading_commands(command: Command, sandbox: MemorySandbox) -> ExecResult:
    """The scripted shell, plus what a grading container is asked: `rm -f --`, the plugin probe and the launcher."""
    argv = command.argv
    if argv[:3] == ["sh", "-c", TRACKED_RUN]:  # an agent's command: its workspace effect stays unknown here
        command = replace(command, argv=["sh", "-c", argv[4]])
        argv = command.argv
    if argv[:3] == ["rm", "-f", "--"]:
        for path in argv[3:]:
            sandbox.nodes.pop(posixpath.normpath(posixpath.join(command.cwd or "/", path)), None)
        return ExecResult(0, "", "", False, False, 0.0)
    if argv[:3] == ["python", "-I", "-c"]:  # the probe for the image's pytest plugins: this image has none
        return ExecResult(0, "", "", False, False, 0.01)
    if argv[:2] == ["python", "-P"] and argv[2].endswith("/launcher.py"):
        return _launch_on_host(command, sandbox)
    if argv[:2] == ["sh", "-c"] and argv[2].split()[:1] == ["python"]:
        return _python_on_host(command, sandbox)
    return run_shell_commands(command, sandbox)


def _python_on_host(command: Command, sandbox: MemorySandbox) -> ExecResult:
    """An agent's Python command (its tests, say), run on this host in a scratch copy of the workspace; what it
    writes there is not copied back."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="memory-run-") as scratch:
        root = Path(scratch)
        _copy_out(sandbox, WORKSPACE, root)
        (root / "bin").mkdir()
        (root / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')  # a link would lose the venv
        (root / "bin" / "python").chmod(0o755)
        path = f"{root / 'bin'}:{os.environ['PATH']}"
        try:
            ran = subprocess.run(
                ["sh", "-c", command.argv[2]],
                cwd=f"{root}{command.cwd or WORKSPACE}",
                env={**os.environ, **command.env, "PATH": path},
                capture_output=True,
                text=True,
                timeout=command.timeout,
            )
        except subprocess.TimeoutExpired as expired:
            return ExecResult(124, str(expired.stdout or ""), str(expired.stderr or ""), True, False, command.timeout)
    return ExecResult(ran.returncode, ran.stdout, ran.stderr, False, False, time.monotonic() - started)


def run_shell_commands(command, sandbox):
    """The in-memory sandbox's answer to a shell command: the few the tests run (echo, ln -s, ls, pwd, true, exit N,
    sleep as a timeout), joined by `;` or `&&`; anything else is 127."""
    argv = command.argv
    script = argv[2] if argv[:2] == ["sh", "-c"] else shlex.join(argv)
    out, err, code = "", "", 0
    for part in re.split(r"\s*(?:;|&&)\s*", script.strip()):
        words = shlex.split(part.replace(">&2", " >&2 "))
        to_err = ">&2" in words
        words = [word for word in words if word != ">&2"]
        if not words:
            continue
        name, args = words[0], words[1:]
        if name == "echo":
            text = " ".join(args) + "\n"
            out, err = (out, err + text) if to_err else (out + text, err)
            code = 0
        elif name in ("true", "pwd"):
            out, code = out + ("/workspace\n" if name == "pwd" else ""), 0
        elif name == "exit":
            return ExecResult(int(args[0]), out, err, False, False, 0.01)
        elif name == "sleep":
            return ExecResult(124, out, err, True, False, float(args[0]))
        elif name == "ln" and args[:1] == ["-s"]:
            link = tarfile.TarInfo(args[2])
            link.type, link.linkname = tarfile.SYMTYPE, args[1]
            archive = io.BytesIO()
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.addfile(link)
            sandbox.import_tree("/workspace", archive.getvalue())
            code = 0
        elif name == "ls":
            where = posixpath.join(command.cwd or WORKSPACE, args[0] if args else ".")
            try:
                out, code = out + "".join(f"{entry.name}\n" for entry in sandbox.list_dir(where)), 0
            except NotADirectoryError:
                out, code = out + args[0] + "\n", 0
            except SandboxFileNotFound:
                err, code = err + f"ls: cannot access '{args[0] if args else '.'}'\n", 2
        else:
            return ExecResult(127, out, err + f"sh: {name}: not scripted\n", False, False, 0.0)
        if code and "&&" in script:
            break
    return ExecResult(code, out, err, False, False, 0.01)


def _launch_on_host(command: Command, sandbox: MemorySandbox) -> ExecResult:
    started = time.monotonic()
    folder = posixpath.dirname(command.argv[2])
    config_path, nonce_path, report_path = command.argv[3:6]
    nonce = sandbox.read_file(nonce_path).decode().strip()
    sandbox.write_file(nonce_path, b"")
    config = json.loads(sandbox.read_file(config_path))
    with tempfile.TemporaryDirectory(prefix="memory-grading-") as scratch:
        root = Path(scratch)
        _copy_out(sandbox, WORKSPACE, root)
        _copy_out(sandbox, folder, root)
        hosted = _on_host(config, root)
        (root / "config.json").write_text(json.dumps(hosted))
        read_end, write_end = os.pipe()
        child_script = str(root / folder.lstrip("/") / CHILDREN[config["kind"]])
        with open(root / "child.log", "wb") as log:
            child = subprocess.Popen(
                [sys.executable, "-P", child_script, str(root / "config.json"), str(write_end)],
                pass_fds=(write_end,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=hosted["cwd"],
                env={**os.environ, **command.env},
                start_new_session=True,
            )
            os.close(write_end)
            lines, overflow, timed_out = collect(child, read_end, time.monotonic() + config["timeout_s"])
        os.close(read_end)
        sandbox.write_file(config["log"], (root / "child.log").read_bytes())
    text = json.dumps({"child_exit": child.returncode, "timed_out": timed_out, "overflow": overflow, "lines": lines})
    sandbox.write_file(report_path, text)
    signed = f"{nonce} {hashlib.sha256(text.encode()).hexdigest()}\n"
    return ExecResult(0, signed, "", False, False, time.monotonic() - started)


def _copy_out(sandbox: MemorySandbox, path: str, root: Path) -> None:
    """`path` of the sandbox, as the same path under `root`."""
    archive = b"".join(sandbox.export_tree(path, 1 << 30))
    extract_archive(archive, root / posixpath.dirname(path).lstrip("/"))


def _on_host(value: Any, root: Path) -> Any:
    """The child's config with every container path moved under `root`."""
    if isinstance(value, str):
        return value.replace(f"={WORKSPACE}", f"={root}{WORKSPACE}") if not value.startswith("/") else f"{root}{value}"
    if isinstance(value, list):
        return [_on_host(item, root) for item in value]
    if isinstance(value, dict):
        return {key: value[key] if key == "calls" else _on_host(item, root) for key, item in value.items()}
    return value
