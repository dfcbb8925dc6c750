"""Hardened Docker sandboxes: one container per episode, hard timeouts, file I/O, warm pool, reaper."""

from sandbox.docker_backend import DockerBackend, ExecResult, Sandbox
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
from sandbox.file_transfer import DirEntry
from sandbox.limits import Hardening, Limits
from sandbox.reaper import Reaper
from sandbox.warm_pool import WarmPool

__all__ = [
    "DirEntry",
    "DockerBackend",
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
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxGone",
    "WarmPool",
]
