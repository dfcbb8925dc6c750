"""The load bench's arithmetic: latency percentiles, least-squares trends of the server's memory, and the gates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from env_server.observability.live_stats import percentile

MiB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """One reading of the server, `t_s` seconds into the run."""

    t_s: float
    episodes: int
    rss_bytes: float | None
    open_fds: float | None
    containers: int | None


def latency_ms(values: list[float]) -> dict[str, float | int]:
    """Count and p50/p95/p99 in milliseconds of latencies given in seconds."""
    if not values:
        return {"count": 0}
    quantiles = {f"p{q}_ms": percentile(values, q / 100) for q in (50, 95, 99)}
    return {"count": len(values), **{name: round(v * 1000, 1) for name, v in quantiles.items() if v is not None}}


def least_squares_slope(xs: list[float], ys: list[float]) -> float | None:
    """The slope of the least-squares line through the points; None when the xs do not vary."""
    if len(xs) < 2:
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def rss_trend(samples: list[Sample], warmup_s: float) -> dict[str, Any]:
    """How the server's memory grew after the warm-up: as a fraction, in MiB an hour and in MiB an episode."""
    after = [sample for sample in samples if sample.t_s >= warmup_s and sample.rss_bytes is not None]
    trend: dict[str, Any] = {"warmup_s": warmup_s, "samples": len(after)}
    if len(after) < 2:
        return trend | {"growth_fraction": None, "slope_mib_per_h": None, "mib_per_episode": None}
    first, last = after[0].rss_bytes or 0.0, after[-1].rss_bytes or 0.0
    mib = [(sample.rss_bytes or 0.0) / MiB for sample in after]
    per_hour = least_squares_slope([sample.t_s / 3600 for sample in after], mib)
    per_episode = least_squares_slope([float(sample.episodes) for sample in after], mib)
    return trend | {
        "baseline_mib": round(first / MiB, 1),
        "last_mib": round(last / MiB, 1),
        "growth_fraction": round((last - first) / first, 4),
        "slope_mib_per_h": None if per_hour is None else round(per_hour, 2),
        "mib_per_episode": None if per_episode is None else round(per_episode, 4),
    }


def gate_failures(result: dict[str, Any], max_errors: int | None, max_rss_growth: float | None) -> list[str]:
    """Why the run fails its gates (none when it passes): too many errors, or too much memory growth."""
    failures = []
    if max_errors is not None and result["error_count"] > max_errors:
        failures.append(
            f"{result['error_count']} errors {result['errors']} exceed --max-errors {max_errors} "
            f"(CAPACITY_REACHED, {result['capacity_reached']} times, is not counted)"
        )
    growth = result["rss"]["growth_fraction"]
    if max_rss_growth is not None and growth is None:
        failures.append(
            f"no RSS growth to check against --max-rss-growth: fewer than two samples after the "
            f"{result['rss']['warmup_s']:.0f} s warm-up; run longer than the warm-up"
        )
    elif max_rss_growth is not None and growth > max_rss_growth:
        failures.append(
            f"server RSS grew {growth:.1%} after the warm-up ({result['rss']['baseline_mib']} -> "
            f"{result['rss']['last_mib']} MiB, {result['rss']['slope_mib_per_h']} MiB/h), over --max-rss-growth "
            f"{max_rss_growth:.1%}"
        )
    return failures
