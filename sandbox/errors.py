"""Typed failures of the sandbox layer; each message says what to do about it."""


class SandboxError(Exception):
    """Base class of every sandbox failure."""


class DockerUnavailable(SandboxError):
    """The Docker engine cannot be reached."""


class ImageNotFound(SandboxError):
    """The image a sandbox was asked to start from does not exist locally."""


class ExecTimeout(SandboxError):
    """A command ran past its timeout and was killed."""

    def __init__(self, message: str, result: object | None = None):
        super().__init__(message)
        self.result = result


class SandboxGone(SandboxError):
    """The container died or was removed underneath us."""


class FileTooLarge(SandboxError):
    """A file transfer exceeded the size limit."""


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """A path does not exist inside the sandbox."""


class ImageBuildFailed(SandboxError):
    """An image build failed; `output` is the build's log, pip's errors included."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output
