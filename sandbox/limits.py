"""Resource limits and hardening options of a sandbox, as typed values."""

from dataclasses import dataclass, field

from sandbox.layout import AGENT_USER

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Per-container resource limits; every field has a safe default."""

    memory_bytes: int = 1024 * MiB
    pids: int = 256
    cpus: float = 1.0
    tmpfs_bytes: int = 256 * MiB
    output_cap_bytes: int = 64 * 1024
    file_size_bytes: int = 5 * MiB

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "pids", "tmpfs_bytes", "output_cap_bytes", "file_size_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.cpus <= 64:
            raise ValueError(f"Limits.cpus must be in (0, 64], got {self.cpus}")


@dataclass(frozen=True)
class Hardening:
    """Security defaults; a caller relaxes them only through these typed fields."""

    network: bool = False
    user: str = AGENT_USER
    drop_all_capabilities: bool = True
    no_new_privileges: bool = True
    extra_capabilities: tuple[str, ...] = field(default=())
