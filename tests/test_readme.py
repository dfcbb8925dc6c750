"""The README's snippets work as written."""

import re
import subprocess
import sys
from pathlib import Path

REGROW = str(Path(sys.executable).parent / "regrow")
ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_first_screen_gives_the_two_commands():
    first_screen = "\n".join(README.splitlines()[:12])
    assert "make up" in first_screen and "make test" in first_screen


def test_every_python_snippet_runs(docker_backend, base_image):
    snippets = [block for block in _blocks("python") if "from sandbox import" in block]
    assert snippets, "the README should show the sandbox API"
    for snippet in snippets:
        exec(compile(snippet, "README.md", "exec"), {})


def test_every_regrow_subcommand_in_the_readme_exists():
    from typer.testing import CliRunner

    from regrow.cli import app

    # In-process: one `regrow` process per command paid about 3 s of imports each.
    runner = CliRunner()
    commands = set(re.findall(r"`regrow ([a-z]+(?: [a-z]+)?)", README))
    assert commands
    for command in commands:
        words = command.split()
        result = runner.invoke(app, [*words, "--help"])
        if result.exit_code != 0 and len(words) == 2:  # "regrow synth the" is one word of command
            result = runner.invoke(app, [words[0], "--help"])
        assert result.exit_code == 0, f"`regrow {command}` in the README does not exist: {result.output}"


def test_the_vllm_snippet_fails_fast_and_says_what_to_do_without_a_server():
    block = next(block for block in _blocks("bash") if "--vllm-server" in block)
    line = next(line for line in block.splitlines() if "regrow train" in line)
    argv = line.split("regrow train", 1)[1].split()
    # Nothing listens on the snippet's port here: the trainer must stop at once with the remedy, not hang.
    result = subprocess.run([REGROW, "train", *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "vllm" in result.stderr.lower() and "--vllm-server" in result.stderr


def test_every_file_the_readme_links_to_is_in_the_repository():
    linked = re.findall(r"\]\(([^)#\s]+)\)", README)
    local = [target for target in linked if "://" not in target and not target.startswith("mailto:")]
    assert "docs/dashboard.png" in local
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"the README links to files that are not there: {missing}"
