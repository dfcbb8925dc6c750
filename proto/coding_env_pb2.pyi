from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResetRequest(_message.Message):
    __slots__ = ("task_id", "seed", "split", "sampler", "prefix_of", "prefix_steps", "origin", "run_id", "track_effects")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    PREFIX_OF_FIELD_NUMBER: _ClassVar[int]
    PREFIX_STEPS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    seed: int
    split: str
    sampler: str
    prefix_of: str
    prefix_steps: int
    origin: str
    run_id: str
    track_effects: bool
    def __init__(self, task_id: _Optional[str] = ..., seed: _Optional[int] = ..., split: _Optional[str] = ..., sampler: _Optional[str] = ..., prefix_of: _Optional[str] = ..., prefix_steps: _Optional[int] = ..., origin: _Optional[str] = ..., run_id: _Optional[str] = ..., track_effects: _Optional[bool] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("tool", "args_json")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    tool: str
    args_json: str
    def __init__(self, tool: _Optional[str] = ..., args_json: _Optional[str] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("episode_id", "action")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    action: ToolCall
    def __init__(self, episode_id: _Optional[str] = ..., action: _Optional[_Union[ToolCall, _Mapping]] = ...) -> None: ...

class EpisodeRef(_message.Message):
    __slots__ = ("episode_id",)
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    def __init__(self, episode_id: _Optional[str] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("output", "exit_code", "truncated", "feedback", "problem_statement", "tools_json", "done", "reward", "metadata_json")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_STATEMENT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    output: str
    exit_code: int
    truncated: bool
    feedback: str
    problem_statement: str
    tools_json: str
    done: bool
    reward: float
    metadata_json: str
    def __init__(self, output: _Optional[str] = ..., exit_code: _Optional[int] = ..., truncated: _Optional[bool] = ..., feedback: _Optional[str] = ..., problem_statement: _Optional[str] = ..., tools_json: _Optional[str] = ..., done: _Optional[bool] = ..., reward: _Optional[float] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class EpisodeReply(_message.Message):
    __slots__ = ("episode_id", "observation")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    observation: Observation
    def __init__(self, episode_id: _Optional[str] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class EpisodeState(_message.Message):
    __slots__ = ("episode_id", "step_count", "task_id", "done", "steps_left", "seconds_left")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    STEPS_LEFT_FIELD_NUMBER: _ClassVar[int]
    SECONDS_LEFT_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    step_count: int
    task_id: str
    done: bool
    steps_left: int
    seconds_left: float
    def __init__(self, episode_id: _Optional[str] = ..., step_count: _Optional[int] = ..., task_id: _Optional[str] = ..., done: _Optional[bool] = ..., steps_left: _Optional[int] = ..., seconds_left: _Optional[float] = ...) -> None: ...

class CloseReply(_message.Message):
    __slots__ = ("episode_id", "closed")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    closed: bool
    def __init__(self, episode_id: _Optional[str] = ..., closed: _Optional[bool] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClientFrame(_message.Message):
    __slots__ = ("reset", "step", "state", "close")
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    reset: ResetRequest
    step: ToolCall
    state: Empty
    close: Empty
    def __init__(self, reset: _Optional[_Union[ResetRequest, _Mapping]] = ..., step: _Optional[_Union[ToolCall, _Mapping]] = ..., state: _Optional[_Union[Empty, _Mapping]] = ..., close: _Optional[_Union[Empty, _Mapping]] = ...) -> None: ...

class ServerFrame(_message.Message):
    __slots__ = ("observation", "state", "error")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    observation: EpisodeReply
    state: EpisodeState
    error: Error
    def __init__(self, observation: _Optional[_Union[EpisodeReply, _Mapping]] = ..., state: _Optional[_Union[EpisodeState, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...
