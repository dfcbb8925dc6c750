"""The stand-in policy `regrow bench rollouts --skill-policy` plays: it solves a task with its fixed skill, by writing
the task's oracle patch, applying it and submitting; otherwise it submits at once (no engine, no model)."""

import asyncio
import json

from proto.tasks import TaskRecord
from regrow.bench.skill_policy import PATCH_PATH, SKILLS, SkillSampler, skill


class CharTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(char) for char in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i > 0)


def _store(tmp_path, statements: dict[str, str]) -> list[TaskRecord]:
    """Records (only the fields the policy reads) and each task's oracle patch under hidden/."""
    for task_id in statements:
        (tmp_path / "hidden" / task_id).mkdir(parents=True)
        (tmp_path / "hidden" / task_id / "solution.patch").write_text(f"patch of {task_id}\n")
    return [TaskRecord.model_construct(instance_id=i, problem_statement=s) for i, s in statements.items()]


def _turn(sampler, context: str) -> dict:
    generated = asyncio.run(sampler.generate(CharTokenizer().encode(context), 10_000))
    assert generated.ids[-1] == 0 and generated.finished
    text = CharTokenizer().decode(generated.ids[:-1])
    return json.loads(text.split("\n")[1])


def test_skills_are_fixed_by_the_task_id_and_spread_over_the_table():
    assert skill("a") == skill("a") and {skill(f"task-{n}") for n in range(200)} == set(SKILLS)


def test_a_solved_episode_writes_applies_and_submits_and_a_failed_one_submits(tmp_path, monkeypatch):
    records = _store(tmp_path, {"always": "Restore always()", "never": "Restore never()"})
    monkeypatch.setattr("regrow.bench.skill_policy.read_records", lambda store: records)
    monkeypatch.setattr("regrow.bench.skill_policy.skill", lambda task_id: 1.0 if task_id == "always" else 0.0)
    sampler = SkillSampler(CharTokenizer(), 0, tmp_path)
    first = _turn(sampler, "system ... user: Restore always()")
    assert first == {"name": "write_file", "arguments": {"path": PATCH_PATH, "content": "patch of always\n"}}
    second = _turn(sampler, f"Restore always() ... {PATCH_PATH} ... wrote")
    assert second["name"] == "run" and second["arguments"]["command"].startswith(f"git apply {PATCH_PATH}")
    assert _turn(sampler, f"Restore always() {PATCH_PATH} git apply ok")["name"] == "submit"
    assert _turn(sampler, "user: Restore never()")["name"] == "submit"
    assert _turn(sampler, "a task not in the store")["name"] == "submit"
