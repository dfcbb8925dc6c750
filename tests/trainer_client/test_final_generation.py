"""The rollout stream stops playing once the trainer has taken the groups of its last step: before, it played on
through that step's training, sampling episodes nobody would train on, on the cores the step needed."""

from types import SimpleNamespace

import pytest

from trainer_client.rollout.rows import StreamedRollouts, final_generation


def trainer_at(global_step, max_steps, accumulation=1, per_generation=1, iterations=1, micro_step=None):
    args = SimpleNamespace(
        max_steps=max_steps,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=per_generation,
        num_iterations=iterations,
    )
    trainer = SimpleNamespace(args=args, state=SimpleNamespace(global_step=global_step), num_generations=2)
    if micro_step is not None:
        trainer._step = micro_step
    return trainer


@pytest.mark.parametrize(
    ("trainer", "last"),
    [
        (trainer_at(0, 1), True),
        (trainer_at(0, 3), False),
        (trainer_at(2, 3), True),
        # two micro-steps a step, one generation a step
        (trainer_at(1, 2, accumulation=2, per_generation=2, micro_step=2), True),
        (trainer_at(0, 2, accumulation=2, per_generation=2, micro_step=0), False),
        # a generation reused for two iterations covers two optimizer steps
        (trainer_at(2, 4, iterations=2, micro_step=2), True),
        (trainer_at(1, 4, iterations=2, micro_step=1), False),
        # resumed at step 4 of 5: TRL's micro-step counter starts again at 0
        (trainer_at(4, 5, micro_step=0), True),
    ],
)
def test_the_last_generation_of_a_run_is_known_when_it_is_asked_for(trainer, last):
    assert final_generation(trainer) is last


class RecordingStream:
    def __init__(self):
        self.sampler = SimpleNamespace(version=0)
        self.stats = SimpleNamespace(counters=lambda: {})
        self.stopped = 0

    def next_groups(self, count, policy_version, timeout):
        return []

    def stop_playing(self):
        self.stopped += 1


@pytest.mark.parametrize(("global_step", "stops"), [(0, 0), (1, 1)])
def test_rollouts_stop_the_stream_after_taking_the_last_steps_groups(global_step, stops, monkeypatch):
    monkeypatch.setattr("trainer_client.rollout.rows.trajectory_rows", lambda trajectories, tokens: {"prompt_ids": []})
    stream = RecordingStream()

    StreamedRollouts(stream, tokens=None)([], trainer_at(global_step, 2))  # type: ignore[arg-type]

    assert stream.stopped == stops
