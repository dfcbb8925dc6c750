"""When the first candidates all fail the same way for a reason outside them, the run stops with that error (no
Docker)."""

import contextlib
from types import SimpleNamespace

import pytest

from task_synth import pipeline
from task_synth.errors import SynthError
from task_synth.settings import SynthSettings
from task_synth.setup_failures import EARLY_STOP_CANDIDATES, repeated_setup_failure
from task_synth.store.candidate_journal import JOURNAL_DIR, CandidateJournal
from task_synth.store.store_writer import RepoFiles, StoreWriter
from task_synth.store.task_builder import BuiltTask

ORACLE_ERROR = "3 tests fail with the solution, e.g. tests/test_data.py::test_load (FileNotFoundError: data/table.csv)"


def test_three_oracle_failures_the_same_way_stop_with_the_error_and_a_remedy():
    message = repeated_setup_failure([("oracle_failed", ORACLE_ERROR)] * 3)
    assert message is not None
    cause, error, remedy = message.splitlines()
    assert "first 3 candidates" in cause and "fresh task container" in cause
    assert error.strip() == ORACLE_ERROR
    assert remedy.startswith("Remedy:") and "git clone --depth 1" in remedy


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


def test_a_run_whose_oracles_all_fail_stops_after_the_first_candidates(monkeypatch, tmp_path):
    tried = []

    def failing(context, pool, unit, mode, kept):
        tried.append(unit)
        return BuiltTask(None, "oracle_failed", None, 0, ORACLE_ERROR), 0

    monkeypatch.setattr(pipeline, "_candidate", failing)
    context = SimpleNamespace(sandbox_pool=lambda size: contextlib.nullcontext())
    settings = SynthSettings(max_tasks=5, jobs=1)
    with pytest.raises(SynthError, match="fresh task container") as raised:
        pipeline._run_candidates(
            context,
            [(SimpleNamespace(key=f"m.py:f{index}"), "stub") for index in range(13)],
            settings,
            pipeline.SynthReport(),
            lambda *_: None,
            StoreWriter(tmp_path, tmp_path, RepoFiles("repos/r-c", b"", None)),
            CandidateJournal(tmp_path, "repos/r-c"),
        )
    assert len(tried) == EARLY_STOP_CANDIDATES and ORACLE_ERROR in str(raised.value)
    assert not (tmp_path / JOURNAL_DIR).exists()  # a setup failure is judged again once the setup is fixed
