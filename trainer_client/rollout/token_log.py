"""The policy's tokens of every played episode, one `proto.EpisodeTokens` JSON line each, for `regrow traces export`.

The env server records episodes as text; only the trainer sees their token ids and sampler logprobs. The export
joins this file to the server's traces by episode id (`regrow traces export --tokens episode_tokens.jsonl`).
"""

import logging
import threading
from pathlib import Path

from proto import EpisodeTokens
from proto.traces import HintedTurnTokens
from trainer_client.rollout.agent_loop import Trajectory
from trainer_client.rollout.chat_tokens import EpisodeTokenizer

logger = logging.getLogger(__name__)


class TokenLog:
    """Appends one EpisodeTokens line per recorded trajectory to `path`; safe to share between threads.

    With `tokens` (the policy's tokenizer) each line also carries its hinted turns' hint ids, so that `regrow bench
    gpu` can replay the step, SDPO included, with no tokenizer."""

    def __init__(self, path: Path, model: str | None = None, tokens: EpisodeTokenizer | None = None):
        self.path = path
        self.model = model
        self.tokens = tokens
        self.written = 0
        self.skipped = 0  # trajectories whose env sent no episode id: nothing to join them to
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, trajectory: Trajectory) -> None:
        if trajectory.episode_id is None:
            with self._lock:
                self.skipped += 1
                first = self.skipped == 1
            (logger.warning if first else logger.debug)(
                "the env sent no episode_id with episode %s (not a regrow server?): its tokens are not logged to %s",
                trajectory.reset_options,
                self.path,
            )
            return
        tokens = EpisodeTokens(
            episode_id=trajectory.episode_id,
            model=self.model,
            policy_version=trajectory.policy_version,
            prompt_ids=trajectory.prompt_ids,
            completion_ids=trajectory.completion_ids,
            logprobs=trajectory.logprobs,
            env_mask=trajectory.env_mask,
            reward=trajectory.reward,
            hinted_turns=self._hinted(trajectory),
        )
        line = tokens.model_dump_json() + "\n"
        with self._lock:
            # Opened per record and closed at once: a run killed later keeps every line written so far.
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line)
            self.written += 1

    def _hinted(self, trajectory: Trajectory) -> list[HintedTurnTokens]:
        if self.tokens is None:
            return []
        return [
            HintedTurnTokens(
                hint_at=turn.prompt_at, start=turn.start, end=turn.end, hint_ids=self.tokens.hint_ids(turn.feedback)
            )
            for turn in trajectory.hinted_turns
            if turn.feedback is not None
        ]
