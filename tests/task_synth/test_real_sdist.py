"""Opt-in (REGROW_TEST_NETWORK=1): synthesis from a real package's sdist fetched from PyPI."""

import os
import subprocess
import sys

import pytest

from sandbox.archive_extraction import extract_archive
from task_synth.pipeline import synthesize
from task_synth.settings import SynthSettings

pytestmark = [
    pytest.mark.network,
    pytest.mark.docker,
    pytest.mark.skipif(
        os.environ.get("REGROW_TEST_NETWORK") != "1", reason="fetches from PyPI; set REGROW_TEST_NETWORK=1"
    ),
]
# Small, pure Python, no dependencies, and its sdist ships its test suite.
SDIST = "more-itertools==10.5.0"


def test_real_sdist_yields_a_validated_task(tmp_path, docker_backend, base_image):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            SDIST,
            "-d",
            str(tmp_path),
        ],
        check=True,
    )
    (archive,) = tmp_path.glob("*.tar.gz")
    extract_archive(archive, tmp_path)
    source = next(path for path in tmp_path.iterdir() if path.is_dir())
    report = synthesize(str(source), tmp_path / "store", SynthSettings(max_tasks=1, seed=0), backend=docker_backend)
    assert report.valid == 1
    record = report.records[0]
    assert record.FAIL_TO_PASS and record.PASS_TO_PASS
    assert record.deleted[0].path.startswith("more_itertools/")
    assert (tmp_path / "store" / "hidden" / record.instance_id / "solution.patch").exists()
    assert (tmp_path / "store" / record.workspace_archive).is_file()
