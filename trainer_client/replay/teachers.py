"""What a teacher is, and how teachers.yaml becomes live teachers."""

from typing import Any, Protocol

from trainer_client.replay.teacher_call import TeacherReply
from trainer_client.replay.teachers_config import HFTeacherConfig, OpenAITeacherConfig, TeacherConfig


class Teacher(Protocol):
    """A model that proposes the next assistant turn for a chat."""

    name: str

    async def complete(self, messages: list[dict[str, Any]]) -> TeacherReply: ...

    async def aclose(self) -> None: ...


def open_teacher(config: TeacherConfig) -> Teacher:
    """A live teacher for one config entry (an HF teacher loads its weights here)."""
    if isinstance(config, OpenAITeacherConfig):
        from trainer_client.replay.openai_teacher import OpenAITeacher

        return OpenAITeacher(config)
    if isinstance(config, HFTeacherConfig):
        from trainer_client.replay.hf_teacher import HFTeacher

        return HFTeacher(config)
    raise TypeError(f"unknown teacher config {type(config).__name__}")
