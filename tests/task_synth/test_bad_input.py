"""Bad input fails with one line that says what to do, and leaves no task, record or image behind."""

import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.lifecycle.owner import MANAGED_LABEL, OWNER_LABEL
from task_synth.errors import SynthError
from task_synth.pipeline import synthesize
from task_synth.repository.repo_image import SYNTH_LABEL
from task_synth.settings import SynthSettings

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
SETTINGS = SynthSettings(max_tasks=1)


def _synth_images(backend) -> set[str]:
    """This fixture's synth images only: other stacks on the engine build their own meanwhile."""
    images = backend.client.images.list(filters={"label": SYNTH_LABEL})
    return {
        tag
        for image in images
        for tag in image.tags
        if tag.startswith(("regrow/repo-minilib:", "regrow/task-minilib:"))
    }


def _minilib_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "minilib"  # the same name keeps the same repo image tag
    shutil.copytree(MINILIB, copy)
    return copy


def _assert_fails_cleanly(source: str, out: Path, match: str, backend=None) -> None:
    before = _synth_images(backend) if backend else set()
    with pytest.raises(SynthError, match=match) as raised:
        synthesize(source, out, SETTINGS, backend=backend)
    message = str(raised.value)
    assert "\n" not in message and ":" in message  # one line, with a remedy after the colon
    assert not out.exists()
    if backend:
        assert _synth_images(backend) == before


def test_missing_path_is_a_one_line_error_with_a_remedy(tmp_path, docker_backend):
    _assert_fails_cleanly(str(tmp_path / "nowhere"), tmp_path / "out", "does not exist", docker_backend)


def test_repository_without_tests_is_refused_before_any_build(tmp_path, docker_backend):
    copy = _minilib_copy(tmp_path)
    shutil.rmtree(copy / "tests")
    _assert_fails_cleanly(str(copy), tmp_path / "out", "has no tests", docker_backend)


def test_an_sdist_that_left_its_tests_out_says_so_and_names_its_repository(tmp_path, docker_backend):
    copy = _minilib_copy(tmp_path)
    shutil.rmtree(copy / "tests")
    (copy / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: minilib\nVersion: 0.1\n"
        "Project-URL: Documentation, https://minilib.example.org\n"
        "Project-URL: Source, https://github.com/example/minilib\n"
    )
    _assert_fails_cleanly(
        str(copy),
        tmp_path / "out",
        r"sdist that leaves its tests out .*\(https://github.com/example/minilib\)",
        docker_backend,
    )


def test_unresolvable_dependencies_are_refused(tmp_path, docker_backend):
    copy = _minilib_copy(tmp_path)
    pyproject = copy / "pyproject.toml"
    missing = "minilib-helper @ file:///nonexistent/minilib-helper"
    pyproject.write_text(pyproject.read_text().replace("dependencies = []", f'dependencies = ["{missing}"]'))
    _assert_fails_cleanly(str(copy), tmp_path / "out", "cannot resolve the dependencies", docker_backend)


@pytest.mark.docker
def test_suite_failing_at_baseline_is_refused_and_leaves_nothing(tmp_path, docker_backend, base_image):
    copy = _minilib_copy(tmp_path)
    (copy / "tests" / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef broken_environment():\n    raise RuntimeError('no "
        "database')\n"
    )
    _assert_fails_cleanly(str(copy), tmp_path / "out", "fails at baseline", docker_backend)


def test_cli_prints_one_line_and_exits_1_on_bad_input(tmp_path):
    from regrow.cli import app

    result = CliRunner().invoke(app, ["synth", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "does not exist or is not a directory: pass a repository path" in " ".join(
        result.output.split()
    )  # rich wraps
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "named"),
    [(["--mode", "bogus"], "modes.0: Input should be 'stub'"), (["--kind", "klass"], "kinds.0: Input should be")],
)
def test_a_bad_mode_or_kind_is_named_in_the_error_not_hidden_behind_a_link(tmp_path, option, named):
    from regrow.cli import app

    result = CliRunner().invoke(app, ["synth", str(tmp_path), "--out", str(tmp_path / "out"), *option])
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert named in said and "errors.pydantic.dev" not in said, said
    assert not (tmp_path / "out").exists()


def test_the_cli_on_a_repository_without_tests_leaves_no_store_and_no_log_handler(tmp_path, docker_backend):
    import logging

    from regrow.cli import app

    copy = _minilib_copy(tmp_path)
    shutil.rmtree(copy / "tests")
    result = CliRunner().invoke(app, ["synth", str(copy), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "has no tests" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()  # its synth.log had been opened: the run logged its checkout
    for name in ("task_synth", "sandbox", "task_synth.progress"):
        assert not [h for h in logging.getLogger(name).handlers if isinstance(h, logging.FileHandler)], name


@pytest.mark.docker
def test_a_run_first_removes_the_sandboxes_a_killed_run_left(tmp_path, docker_backend, base_image):
    """A synth run killed with SIGKILL cleans nothing up; the next run, even one refused at once, reaps what it left."""
    dead_run = f"{socket.gethostname()}:999999999:1"
    left = docker_backend.api.create_container(
        base_image, ["sleep", "infinity"], labels={MANAGED_LABEL: "1", OWNER_LABEL: dead_run}
    )["Id"]
    try:
        copy = _minilib_copy(tmp_path)
        shutil.rmtree(copy / "tests")
        _assert_fails_cleanly(str(copy), tmp_path / "out", "has no tests", docker_backend)
        assert left not in {c["Id"] for c in docker_backend.managed_containers()}
    finally:
        docker_backend.remove(left)


@pytest.mark.parametrize("member", ["evil-1.0/../../escaped", "/tmp/regrow-synth-absolute-escape"])
def test_a_hostile_sdist_is_refused_in_one_line_and_writes_nothing_outside(tmp_path, member):
    import io
    import tarfile

    from regrow.cli import app

    sdist = tmp_path / "downloads" / "evil-1.0.tar.gz"
    sdist.parent.mkdir()
    with tarfile.open(sdist, "w:gz") as archive:
        for name in ("evil-1.0/setup.py", member):
            info = tarfile.TarInfo(name)
            info.size = 5
            archive.addfile(info, io.BytesIO(b"pwned"))
    before = {path for path in tmp_path.rglob("*")}
    result = CliRunner().invoke(app, ["synth", str(sdist), "--out", str(tmp_path / "out")])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"member '{member}'" in said and "refused, and nothing was unpacked" in said, said
    assert "Traceback" not in result.output
    assert {path for path in tmp_path.rglob("*")} == before  # no store, no escaped file
    assert not Path("/tmp/regrow-synth-absolute-escape").exists()
