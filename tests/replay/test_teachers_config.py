"""teachers.yaml parsing and the spending cap's bookkeeping."""

import pytest

from trainer_client.replay.spending import BudgetExhausted, SpendingCap
from trainer_client.replay.teacher_call import call_cost_usd, worst_case_cost_usd
from trainer_client.replay.teachers_config import HFTeacherConfig, OpenAITeacherConfig, load_teachers_file

TEACHERS_YAML = """
concurrency: 3
max_cost_usd: 2.5
teachers:
  - name: big
    kind: openai
    base_url: http://127.0.0.1:9/v1
    model: big-model
    api_key_env: BIG_KEY
    input_usd_per_mtok: 3.0
    output_usd_per_mtok: 15.0
    timeout_s: 20
    max_retries: 2
  - name: local
    kind: hf
    path: /models/tiny
"""


def test_teachers_file_parses_both_kinds(tmp_path):
    path = tmp_path / "teachers.yaml"
    path.write_text(TEACHERS_YAML)
    plan = load_teachers_file(path)
    big, local = plan.teachers
    assert isinstance(big, OpenAITeacherConfig) and isinstance(local, HFTeacherConfig)
    assert (big.api_key_env, big.max_retries, big.timeout_s) == ("BIG_KEY", 2, 20.0)
    assert str(local.path) == "/models/tiny"
    assert (plan.concurrency, plan.max_cost_usd) == (3, 2.5)


def test_a_run_stops_after_8_failures_of_one_teacher_in_a_row_unless_the_file_says_otherwise(tmp_path):
    path = tmp_path / "teachers.yaml"
    path.write_text(TEACHERS_YAML)
    assert load_teachers_file(path).max_failures_in_a_row == 8
    path.write_text("max_failures_in_a_row: null\n" + TEACHERS_YAML)
    assert load_teachers_file(path).max_failures_in_a_row is None
    path.write_text("max_failures_in_a_row: 0\n" + TEACHERS_YAML)
    with pytest.raises(ValueError, match="max_failures_in_a_row"):
        load_teachers_file(path)


def test_duplicate_teacher_names_are_rejected(tmp_path):
    path = tmp_path / "teachers.yaml"
    path.write_text(TEACHERS_YAML.replace("name: local", "name: big"))
    with pytest.raises(ValueError, match="teacher names must be unique"):
        load_teachers_file(path)


def test_an_unknown_kind_names_the_file(tmp_path):
    path = tmp_path / "teachers.yaml"
    path.write_text(TEACHERS_YAML.replace("kind: hf", "kind: carrier-pigeon"))
    with pytest.raises(ValueError, match="teachers.yaml is not a valid teachers file"):
        load_teachers_file(path)


def test_cost_is_priced_per_million_tokens():
    config = OpenAITeacherConfig(
        name="t", base_url="http://x/v1", model="m", input_usd_per_mtok=3, output_usd_per_mtok=15
    )
    assert call_cost_usd(config, 1_000_000, 0) == pytest.approx(3.0)
    assert call_cost_usd(config, 2000, 1000) == pytest.approx(0.006 + 0.015)


def test_worst_case_covers_every_input_byte_and_the_full_reply():
    config = OpenAITeacherConfig(
        name="t", base_url="http://x/v1", model="m", input_usd_per_mtok=1, output_usd_per_mtok=2, max_tokens=100
    )
    messages = [{"role": "user", "content": "x" * 992}]
    assert worst_case_cost_usd(config, messages) == pytest.approx((1000 * 1 + 100 * 2) / 1e6)


def test_spending_cap_refuses_a_call_that_could_pass_it_and_books_the_real_cost():
    cap = SpendingCap(1.0)
    first = cap.reserve(0.6)
    with pytest.raises(BudgetExhausted, match="raise max_cost_usd"):
        cap.reserve(0.5)  # 0.6 is still in flight
    cap.settle(first, 0.2)
    second = cap.reserve(0.5)
    cap.settle(second, 0.5)
    assert cap.spent_usd == pytest.approx(0.7)
    with pytest.raises(BudgetExhausted):
        cap.reserve(0.31)


def test_no_cap_never_refuses():
    cap = SpendingCap(None)
    cap.settle(cap.reserve(1e9), 1e9)
    assert cap.spent_usd == 1e9
