"""`regrow bench dashboard` on a small synthetic database: it runs without an engine and reports every part."""

import json

from typer.testing import CliRunner

from regrow.cli import app


def test_the_dashboard_bench_reports_each_part_of_a_refresh():
    result = CliRunner().invoke(
        app, ["bench", "dashboard", "--episodes", "300", "--tasks", "7", "--steps", "2", "--repetitions", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["episodes"] == 300 and figures["steps"] == 600 and figures["database_mib"] >= 0
    parts = figures["parts"]
    assert set(parts) == {"reward_summary", "recent_episodes", "task_pass_rates", "live_latency", "live_minutes"}
    assert all(0 <= part["p50_ms"] <= part["p95_ms"] for part in parts.values())
    assert figures["snapshot_p50_ms"] == round(sum(part["p50_ms"] for part in parts.values()), 2)
