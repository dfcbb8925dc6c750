"""The wire contract of regrow: actions, observations, episode state and task records.

Both the env server and the trainer import these models; nothing else of regrow is shared.
"""

from proto.actions import TOOL_ARGS, ToolCall, tool_description, tool_specs
from proto.health import ENVIRONMENT_FAILURES, ServerHealth
from proto.observations import PASS_REWARD, CodingObservation, EpisodeState, RewardDetails, TestOutcome, is_pass
from proto.tasks import DeletedUnit, TaskRecord, TaskStats
from proto.traces import EpisodeTokens, EpisodeTrace, StepTrace

__all__ = [
    "ENVIRONMENT_FAILURES",
    "PASS_REWARD",
    "TOOL_ARGS",
    "CodingObservation",
    "DeletedUnit",
    "EpisodeState",
    "EpisodeTokens",
    "EpisodeTrace",
    "RewardDetails",
    "ServerHealth",
    "StepTrace",
    "TaskRecord",
    "TaskStats",
    "TestOutcome",
    "ToolCall",
    "is_pass",
    "tool_description",
    "tool_specs",
]
