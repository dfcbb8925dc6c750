"""Reward integrity: only the agent's source diff is graded, in a fresh container, against pristine tests."""

import pytest

from env_server.lifecycle.reset_options import ResetOptions
from proto.actions import ToolCall
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS, TESTS, WRONG_OPS

pytestmark = pytest.mark.docker


def play(runtime, *calls):
    episode = runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
    observation = None
    for tool, args in calls:
        observation = runtime.take_step(episode, ToolCall(tool=tool, args=args))
    if not observation or not observation.done:
        observation = runtime.take_step(episode, ToolCall(tool="submit"))
    return observation


def test_oracle_solution_scores_one(runtime):
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": ORIGINAL_OPS}))
    assert final.done and final.reward == 1.0
    details = final.metadata["reward_details"]
    assert details["f2p_passed"] == 3 and details["p2p_passed"] == 3
    assert all(t["outcome"] == "passed" for t in details["tests"])
    assert final.feedback is None


def test_empty_submission_scores_zero_and_names_failing_tests(runtime):
    final = play(runtime)
    assert final.reward == 0.0
    assert "test_clamp_below" in final.feedback
    assert final.metadata["reward_details"]["p2p_passed"] == 3


def test_wrong_solution_scores_partial_fraction(runtime):
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": WRONG_OPS}))
    assert final.reward == 0.0  # `return value` passes none of the clamp tests
    assert final.metadata["reward_details"]["f2p_total"] == 3


def test_breaking_a_pass_to_pass_test_zeroes_the_reward(runtime):
    broken = ORIGINAL_OPS.replace("return a + b", "return a - b")
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": broken}))
    assert final.metadata["reward_details"]["f2p_passed"] == 3
    assert final.reward == 0.0


CHEATS = {
    "test_edited_to_assert_true": ("tests/test_ops.py", TESTS.replace("assert clamp(", "assert True or clamp(")),
    "conftest_skipping_everything": (
        "conftest.py",
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
        "    for item in items:\n        item.add_marker(pytest.mark.skip(reason='cheat'))\n",
    ),
    "sitecustomize": (
        "sitecustomize.py",
        "import builtins\n_real = builtins.__import__\n"
        "def _patched(name, *a, **k):\n    module = _real(name, *a, **k)\n"
        "    if name == 'calc.ops':\n        module.clamp = lambda v, lo, hi: max(lo, min(v, hi))\n    return module\n"
        "builtins.__import__ = _patched\n",
    ),
    "pytest_ini_addopts": ("pytest.ini", '[pytest]\naddopts = -k "not clamp"\n'),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheat_with_wrong_solution_scores_zero_and_is_flagged(runtime, cheat):
    path, content = CHEATS[cheat]
    final = play(
        runtime,
        ("write_file", {"path": "calc/ops.py", "content": WRONG_OPS}),
        ("write_file", {"path": path, "content": content}),
    )
    assert final.reward == 0.0
    assert path in final.metadata["reward_details"]["ignored_paths"]


def test_binary_mode_pays_only_for_all_tests(runtime, monkeypatch):
    monkeypatch.setattr(runtime.settings, "reward_mode", "binary")
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": ORIGINAL_OPS}))
    assert final.reward == 1.0 and final.metadata["reward_details"]["mode"] == "binary"
    partial = ORIGINAL_OPS.replace('raise ValueError("low must not exceed high")', "pass")
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": partial}))
    assert final.metadata["reward_details"]["f2p_passed"] == 2
    assert final.reward == 0.0


def test_a_large_and_non_utf8_submission_is_graded_whole(runtime):
    padding = "".join(f"CONSTANT_{n} = {n}\n" for n in range(6000))  # a diff far over the 64 KiB exec output cap
    final = play(
        runtime,
        ("write_file", {"path": "calc/ops.py", "content": ORIGINAL_OPS + padding}),
        ("run", {"command": "printf 'caf\\351\\n' > calc/latin1.txt"}),
    )
    assert final.reward == 1.0 and final.metadata["reward_details"]["error"] is None


def test_a_submission_that_breaks_a_test_files_imports_scores_zero_without_a_false_alarm(runtime):
    broken = ORIGINAL_OPS.replace("def mul(", "def multiply(")  # tests/test_ops.py imports mul: it no longer collects
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": broken}))
    details = final.metadata["reward_details"]
    assert final.reward == 0.0 and details["tampered"] is False, details


def test_a_submission_that_loops_is_stopped_at_the_time_its_suite_earns_and_says_so(runtime):
    looping = ORIGINAL_OPS.replace(
        '    """Return value limited', '    while True:\n        pass\n    """Return value limited'
    )
    final = play(runtime, ("write_file", {"path": "calc/ops.py", "content": looping}))
    details = final.metadata["reward_details"]
    # The demo task's suite took 1 s at synthesis: 3 x 1 s + 30 s of slack, not the server's 300 s cap.
    assert details["timeout_s"] == 33.0, details
    assert final.reward == 0.0 and "ran past 33s" in (details["error"] or ""), details
    assert details["hidden_passed"] == 0 and details["tampered"] is False, details
