"""Prometheus metrics of one server, in their own registry so several servers can share a process."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
REWARD_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


class ServerMetrics:
    """The counters, gauges and histograms `/metrics` exposes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # process_resident_memory_bytes and process_open_fds: what a long run watches for leaks.
        ProcessCollector(registry=self.registry)
        self.active_episodes = Gauge(
            "regrow_active_episodes", "Episodes holding a sandbox now.", registry=self.registry
        )
        self.episodes_total = Counter(
            "regrow_episodes_total", "Episodes ended, by how they ended.", ["status"], registry=self.registry
        )
        self.step_seconds = Histogram(
            "regrow_step_seconds", "Step latency by tool.", ["tool"], buckets=STEP_BUCKETS, registry=self.registry
        )
        self.reward = Histogram(
            "regrow_reward", "Rewards of graded episodes.", buckets=REWARD_BUCKETS, registry=self.registry
        )
        # Two pools may share an image (two checkouts with the same dependencies): each is its own series.
        self.warm_pool_ready = Gauge(
            "regrow_warm_pool_ready",
            "Started sandboxes waiting in the warm pool.",
            ["image", "pool"],
            registry=self.registry,
        )
        self.engine_up = Gauge("regrow_engine_up", "1 while the Docker engine answers, else 0.", registry=self.registry)
        self.free_episode_slots = Gauge(
            "regrow_free_episode_slots",
            "Episodes the server would start now (0 while the engine is away).",
            registry=self.registry,
        )
        self.max_episodes = Gauge("regrow_max_episodes", "Episodes the server runs at most.", registry=self.registry)
        self.sandbox_failures = Counter(
            "regrow_sandbox_failures_total", "Sandbox operations that failed.", ["operation"], registry=self.registry
        )

        self.tampered = Counter(
            "regrow_reward_tampered_total",
            "Graded submissions found forged, by tripwire.",
            ["reason"],
            registry=self.registry,
        )

        self.twins_graded = Counter(
            "regrow_twins_graded_total",
            "Impossible twins graded: `forged` earned a reward (the grader was beaten), `held` did not.",
            ["outcome"],
            registry=self.registry,
        )

        self.trace_write_failures = Counter(
            "regrow_trace_write_failures_total",
            "Times trace writes began to fail (locked or full database); their records then wait in the backlog.",
            registry=self.registry,
        )
        self.trace_records_dropped = Counter(
            "regrow_trace_records_dropped_total",
            "Trace records never written: backlog full, rejected by the database, or still unwritten at shutdown.",
            ["record"],
            registry=self.registry,
        )
        self.trace_backlog_records = Gauge(
            "regrow_trace_backlog_records",
            "Trace records waiting in memory for the database to take writes again.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
