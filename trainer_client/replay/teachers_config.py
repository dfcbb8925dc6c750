"""teachers.yaml: which teachers to ask, what they cost, and the run's concurrency and spending cap."""

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _TeacherBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Unique name; the report and the pairs use it.")
    timeout_s: float = Field(default=60.0, gt=0, description="Deadline of one attempt.")
    max_tokens: int = Field(default=512, ge=1, description="Cap on the reply's tokens.")
    input_usd_per_mtok: float = Field(default=0.0, ge=0, description="Price per million input tokens.")
    output_usd_per_mtok: float = Field(default=0.0, ge=0, description="Price per million output tokens.")


class OpenAITeacherConfig(_TeacherBase):
    """A chat-completions endpoint: OpenAI itself or any server that speaks its API."""

    kind: Literal["openai"] = "openai"
    base_url: str = Field(description="Up to and including /v1, e.g. http://127.0.0.1:8000/v1.")
    model: str
    api_key_env: str | None = Field(default=None, description="Env var holding the API key; none for local.")
    max_retries: int = Field(
        default=3,
        ge=0,
        description="Extra attempts after a timeout, connection fault, 408, 409, 429 or 5xx; the openai SDK waits "
        "0.5 s doubling to 8 s (jittered) between them, or the server's Retry-After.",
    )
    temperature: float = Field(default=0.0, ge=0)


class HFTeacherConfig(_TeacherBase):
    """A local transformers causal LM with a chat template, decoded greedily."""

    kind: Literal["hf"] = "hf"
    path: Path = Field(description="Folder with the model and its tokenizer.")
    device: str = Field(default="cpu")


TeacherConfig = Annotated[OpenAITeacherConfig | HFTeacherConfig, Field(discriminator="kind")]


class TeachersFile(BaseModel):
    """The whole teachers.yaml."""

    model_config = ConfigDict(extra="forbid")

    teachers: list[TeacherConfig] = Field(min_length=1)
    concurrency: int = Field(default=4, ge=1, description="Teacher calls in flight at once.")
    max_cost_usd: float | None = Field(default=None, ge=0, description="Stop the run before spending more.")
    max_failures_in_a_row: int | None = Field(
        default=8,
        ge=1,
        description="Stop the run once one teacher has failed this many calls in a row (an error or an unparseable "
        "reply): a step any teacher fails makes no pair, so the others' calls would be spent for nothing; null: never.",
    )

    @model_validator(mode="after")
    def _names_are_unique(self) -> "TeachersFile":
        names = [teacher.name for teacher in self.teachers]
        if len(set(names)) != len(names):
            raise ValueError(f"teacher names must be unique, got {names}")
        return self


def load_teachers_file(path: Path) -> TeachersFile:
    """Parse and validate teachers.yaml; errors name the file and the field."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read teachers file {path}: {error}") from error
    try:
        return TeachersFile.model_validate(raw)
    except ValidationError as error:
        raise ValueError(f"{path} is not a valid teachers file: {error}") from error
