"""A FAIL_TO_PASS test that a trivial answer passes is dropped, and a task left with none is rejected (real Docker)."""

import shutil
import textwrap
from pathlib import Path

import pytest

from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.settings import SynthSettings
from task_synth.validation.repo_context import prepare_repo
from task_synth.validation.verdict import validate

pytestmark = pytest.mark.docker
MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
WORDS = '''
"""Word helpers."""

_SEEN = []


def normalize(text):
    """`text` stripped and lower-cased."""
    stripped = text.strip()
    lowered = stripped.lower()
    return lowered


def remember(word):
    """Note `word` as seen; returns nothing."""
    _SEEN.append(word)
    _SEEN.sort()
    return None
'''
TESTS = """
from minilib.words import normalize, remember


def test_normalize_is_deterministic():
    assert normalize(" Word ") == normalize(" Word ")


def test_normalize_strips_and_lowers():
    assert isinstance(normalize(" Word "), str) and normalize(" Word ") == "word"


def test_remember_returns_nothing():
    assert remember("x") is None


def test_package_has_a_docstring():
    import minilib

    assert minilib.__doc__
"""


@pytest.fixture
def words_repo(tmp_path) -> Path:
    """A tiny repository with minilib's metadata, so that it shares minilib's wheelhouse."""
    root = tmp_path / "words"
    (root / "src" / "minilib").mkdir(parents=True)
    (root / "tests").mkdir()
    shutil.copy(MINILIB / "pyproject.toml", root / "pyproject.toml")
    (root / "src" / "minilib" / "__init__.py").write_text('"""Words, for the trivial-answer test."""\n')
    (root / "src" / "minilib" / "words.py").write_text(textwrap.dedent(WORDS).lstrip())
    (root / "tests" / "test_words.py").write_text(textwrap.dedent(TESTS).lstrip())
    return root


def test_tests_a_trivial_answer_passes_are_dropped_and_a_task_left_with_none_is_rejected(
    docker_backend, base_image, words_repo, tmp_path
):
    settings = SynthSettings(modes=["stub"], baseline_runs=1, flaky_reruns=0)
    (tmp_path / "scratch").mkdir()
    context = prepare_repo(str(words_repo), settings, docker_backend, tmp_path / "scratch", [])
    units = {unit.qualname: unit for unit in enumerate_units(context.layout) if unit.kind == "function"}
    with context.sandbox() as sb:
        normalize, remember = (
            validate(sb, context.baseline, delete_unit(context.layout, units[name], "stub"), "minilib.words", settings)
            for name in ("normalize", "remember")
        )
    # The always-equal object passes `normalize(x) == normalize(x)`, but no stand-in makes `normalize(" Word ")` the
    # string "word".
    assert normalize.rejection is None
    assert normalize.fail_to_pass == ["tests/test_words.py::test_normalize_strips_and_lowers"]
    assert normalize.trivially_passed == ["tests/test_words.py::test_normalize_is_deterministic"]
    assert "tests/test_words.py::test_normalize_is_deterministic" not in normalize.pass_to_pass
    assert normalize.stand_in_executions == 2 * 3  # one process, a round per stand-in, both F2P tests in each
    # `return None` passes `remember(x) is None`, the only test remember's deletion fails.
    assert remember.rejection == "trivially_solvable" and not remember.fail_to_pass
    assert "return None" in remember.detail and remember.stand_in_executions == 1 * 3


def test_a_repeated_run_reports_each_round_and_tells_the_tests_their_round(
    docker_backend, base_image, words_repo, tmp_path
):
    from task_synth.validation.suite_runs import run_tests

    (words_repo / "tests" / "test_rounds.py").write_text(
        "import os\n\n\ndef test_passes_in_round_one_only():\n    assert os.environ['REGROW_ROUND'] == '1'\n"
    )
    settings = SynthSettings(modes=["stub"], baseline_runs=1, flaky_reruns=0)
    (tmp_path / "scratch").mkdir()
    context = prepare_repo(str(words_repo), settings, docker_backend, tmp_path / "scratch", [])
    tests = [
        "tests/test_rounds.py::test_passes_in_round_one_only",
        "tests/test_words.py::test_remember_returns_nothing",
    ]
    with context.sandbox() as sb:
        run = run_tests(sb, settings.test_command, tests, 120, repeat=3)
    assert [outcomes[tests[0]] for outcomes in run.rounds] == [False, True, False]
    assert [outcomes[tests[1]] for outcomes in run.rounds] == [True, True, True]
    assert run.outcomes == {tests[0]: False, tests[1]: True} and run.executions == 6
