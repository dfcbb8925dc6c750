"""When the first candidates all fail the same way for a reason outside them, the run stops with that error (no Docker)."""

import contextlib
from types import SimpleNamespace

import pytest

from task_synth import pipeline
from task_synth.errors import SynthError
from task_synth.pipeline import EARLY_STOP_CANDIDATES, TASK_IMAGE_FAILED, repeated_setup_failure
from task_synth.settings import SynthSettings
from task_synth.task_builder import BuiltTask

PIP_ERROR = "building image the task image failed (error: metadata-generation-failed): check that the wheelhouse holds every dependency"


def test_three_task_images_failing_the_same_way_stop_with_pips_error_and_a_remedy():
    message = repeated_setup_failure([("import_broken", TASK_IMAGE_FAILED + PIP_ERROR)] * 3)
    assert message is not None
    cause, error, remedy = message.splitlines()
    assert "first 3 candidates" in cause and "task images do not build" in cause
    assert error.strip() == PIP_ERROR
    assert remedy.startswith("Remedy:") and "pip install -e ." in remedy


def test_the_same_import_error_or_oracle_message_three_times_stops():
    for rejection in ("import_broken", "oracle_failed"):
        message = repeated_setup_failure([(rejection, "ModuleNotFoundError: No module named 'tzdata'")] * 3)
        assert message is not None and "No module named 'tzdata'" in message, rejection


def test_timeouts_stop_whatever_their_output():
    outcomes = [("timeout", f"the tests ran past 600s; last output: test_{index}") for index in range(3)]
    message = repeated_setup_failure(outcomes)
    assert message is not None and "time out" in message.splitlines()[0] and "REGROW_SYNTH_TEST_TIMEOUT_S" in message


def test_different_errors_are_properties_of_the_candidates_and_do_not_stop():
    outcomes = [("import_broken", f"NameError: name '{name}' is not defined") for name in ("gcd", "lcm", "median")]
    assert repeated_setup_failure(outcomes) is None
    assert repeated_setup_failure([("timeout", ""), ("timeout", ""), ("import_broken", "x")]) is None


def test_ordinary_rejections_never_stop_a_run():
    for rejection in ("no_f2p", "no_p2p", "flaky", "leak", "trivially_solvable"):
        assert repeated_setup_failure([(rejection, "same")] * 5) is None, rejection


def test_only_the_first_candidates_count():
    assert repeated_setup_failure([("timeout", "")] * (EARLY_STOP_CANDIDATES - 1)) is None
    assert repeated_setup_failure([(None, ""), *[("timeout", "")] * 5]) is None


def test_a_run_whose_task_images_all_fail_stops_after_the_first_candidates(monkeypatch):
    tried = []

    def failing(context, pool, unit, mode, created_images):
        tried.append(unit)
        return BuiltTask(None, "import_broken", None, 0, TASK_IMAGE_FAILED + PIP_ERROR), 0

    monkeypatch.setattr(pipeline, "_candidate", failing)
    context = SimpleNamespace(sandbox_pool=lambda size: contextlib.nullcontext())
    settings = SynthSettings(max_tasks=5, jobs=1)
    with pytest.raises(SynthError, match="task images do not build") as raised:
        pipeline._run_candidates(context, [(index, "stub") for index in range(13)], settings, pipeline.SynthReport(), [], lambda *_: None)
    assert len(tried) == EARLY_STOP_CANDIDATES and PIP_ERROR in str(raised.value)
