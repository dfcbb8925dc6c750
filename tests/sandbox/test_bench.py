"""`regrow bench sandbox` prints every figure the issue asks for, as one JSON object."""

import json

from typer.testing import CliRunner

from regrow.cli import app


def test_bench_sandbox_prints_one_json_object_with_every_figure(docker_backend, base_image):
    result = CliRunner().invoke(app, ["bench", "sandbox", "--repetitions", "5"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    for key in ("a_cli_docker_run", "b_sdk_create_start", "c_warm_pool_acquire", "d_sdk_exec_run", "e_sandbox_exec"):
        assert figures[key]["p50_ms"] > 0 and figures[key]["p95_ms"] >= figures[key]["p50_ms"]
    assert figures["warm_acquire_vs_create"] > 0 and figures["exec_overhead"] > 0
