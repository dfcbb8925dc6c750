"""Hardened sandboxes: the `Sandbox` interface (runtime/), the Docker engine's containers, warm pool and reaper
(lifecycle/), and the engine proxy (proxy/)."""

from sandbox.errors import (
    DockerUnavailable,
    ExecTimeout,
    FileTooLarge,
    ImageBuildFailed,
    ImageNotFound,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
)
from sandbox.lifecycle.backend_protocol import SandboxBackend
from sandbox.lifecycle.docker_backend import DockerBackend
from sandbox.lifecycle.reaper import Reaper
from sandbox.lifecycle.warm_pool import WarmPool
from sandbox.limits import Hardening, Limits
from sandbox.runtime.docker_sandbox import DockerSandbox
from sandbox.runtime.sandbox_protocol import DirEntry, ExecResult, Sandbox

__all__ = [
    "DirEntry",
    "DockerBackend",
    "DockerSandbox",
    "DockerUnavailable",
    "ExecResult",
    "ExecTimeout",
    "FileTooLarge",
    "Hardening",
    "ImageBuildFailed",
    "ImageNotFound",
    "Limits",
    "Reaper",
    "Sandbox",
    "SandboxBackend",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxGone",
    "WarmPool",
]
