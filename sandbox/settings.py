"""Sandbox configuration from the environment (prefix REGROW_SANDBOX_)."""

from pydantic_settings import BaseSettings, SettingsConfigDict

from sandbox.limits import Limits, MiB


class SandboxSettings(BaseSettings):
    """Defaults for every sandbox this process starts."""

    model_config = SettingsConfigDict(env_prefix="REGROW_SANDBOX_")

    docker_host: str | None = None  # e.g. tcp://docker-proxy:2375; unset: DOCKER_HOST or the default socket
    memory_mib: int = 1024
    pids: int = 256
    cpus: float = 1.0
    tmpfs_mib: int = 256
    output_cap_kib: int = 64
    file_size_mib: int = 5

    def limits(self) -> Limits:
        return Limits(
            memory_bytes=self.memory_mib * MiB,
            pids=self.pids,
            cpus=self.cpus,
            tmpfs_bytes=self.tmpfs_mib * MiB,
            output_cap_bytes=self.output_cap_kib * 1024,
            file_size_bytes=self.file_size_mib * MiB,
        )
