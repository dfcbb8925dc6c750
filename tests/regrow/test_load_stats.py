"""The load bench without an engine: percentiles, least-squares slopes, memory growth, gates and the plan's bounds."""

from pathlib import Path

import pytest

from regrow.bench.load import LoadPlan
from regrow.bench.load_stats import (
    MiB,
    Sample,
    gate_failures,
    latency_ms,
    least_squares_slope,
    percentile,
    rss_trend,
)


def test_percentile_interpolates_between_ranks():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.95) == pytest.approx(95.05)
    assert percentile(values, 0.0) == 1 and percentile(values, 1.0) == 100
    assert percentile([3.0], 0.99) == 3


def test_latency_summary_is_in_milliseconds_and_empty_when_nothing_was_measured():
    assert latency_ms([0.1, 0.2, 0.3]) == {"count": 3, "p50_ms": 200.0, "p95_ms": 290.0, "p99_ms": 298.0}
    assert latency_ms([]) == {"count": 0}


def test_least_squares_slope_recovers_a_noisy_line():
    xs = [float(x) for x in range(10)]
    ys = [2.0 * x + 1 + (0.5 if x % 2 else -0.5) for x in xs]
    assert least_squares_slope(xs, ys) == pytest.approx(2.0, abs=0.1)
    assert least_squares_slope([1.0, 1.0], [1.0, 2.0]) is None
    assert least_squares_slope([1.0], [1.0]) is None


def _samples(rss_mib: list[float], every_s: float = 600, episodes_each: int = 100) -> list[Sample]:
    return [
        Sample(t_s=i * every_s, episodes=i * episodes_each, rss_bytes=mib * MiB, open_fds=40, containers=4)
        for i, mib in enumerate(rss_mib)
    ]


def test_rss_growth_is_measured_after_the_warmup_only():
    # 100 -> 200 MiB in the warm-up, then 200 -> 210 MiB over the next hour (six samples 10 min apart)
    trend = rss_trend(_samples([100, 200, 202, 204, 206, 208, 210]), warmup_s=600)
    assert trend["baseline_mib"] == 200 and trend["last_mib"] == 210
    assert trend["growth_fraction"] == pytest.approx(0.05)
    assert trend["slope_mib_per_h"] == pytest.approx(12.0)  # 2 MiB per 10 min
    assert trend["mib_per_episode"] == pytest.approx(0.02)  # 2 MiB per 100 episodes


def test_rss_growth_is_unknown_without_two_samples_after_the_warmup():
    trend = rss_trend(_samples([100, 200]), warmup_s=900)
    assert trend["growth_fraction"] is None and trend["slope_mib_per_h"] is None


def _result(errors: dict[str, int], growth: float | None) -> dict:
    rss = {"warmup_s": 300.0, "growth_fraction": growth, "baseline_mib": 200, "last_mib": 230, "slope_mib_per_h": 30}
    return {"errors": errors, "error_count": sum(errors.values()), "capacity_reached": 7, "rss": rss}


def test_gates_pass_within_limits_and_name_what_was_exceeded():
    assert gate_failures(_result({}, 0.01), max_errors=0, max_rss_growth=0.1) == []
    assert gate_failures(_result({"TIMEOUT": 3}, 0.5), max_errors=None, max_rss_growth=None) == []
    [errors] = gate_failures(_result({"TIMEOUT": 2, "WRONG_OUTPUT": 1}, 0.01), max_errors=2, max_rss_growth=None)
    assert "3 errors" in errors and "--max-errors 2" in errors and "TIMEOUT" in errors
    [memory] = gate_failures(_result({}, 0.15), max_errors=None, max_rss_growth=0.1)
    assert "15.0%" in memory and "--max-rss-growth" in memory


def test_the_memory_gate_fails_a_run_too_short_to_judge():
    [short] = gate_failures(_result({}, None), max_errors=None, max_rss_growth=0.1)
    assert "run longer than the warm-up" in short


def test_a_plan_runs_only_on_loopback_and_within_its_bounds():
    LoadPlan(Path("tasks"), clients=4, steps=8, duration_s=60, url="http://127.0.0.1:8000")
    with pytest.raises(ValueError, match="not a loopback address"):
        LoadPlan(Path("tasks"), clients=4, steps=8, duration_s=60, url="http://10.0.0.7:8000")
    with pytest.raises(ValueError, match="--episodes"):
        LoadPlan(Path("tasks"), clients=0, steps=8, duration_s=60)
    with pytest.raises(ValueError, match="--duration"):
        LoadPlan(Path("tasks"), clients=1, steps=8, duration_s=13 * 3600)
