"""JUnit parsing into pytest node ids, canary selection and the solution patch (pure Python, no Docker)."""

import subprocess
from pathlib import Path

from task_synth.candidates import enumerate_units
from task_synth.canary_scan import canaries_for
from task_synth.deletion import delete_unit
from task_synth.repo_layout import read_layout
from task_synth.test_runs import parse_junit
from task_synth.validation import importing_test_files, pytest_arguments
from task_synth.workspace import build_workspace, solution_patch

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_shapes.TestRectangle" name="test_area" file="tests/test_shapes.py" line="8" />
<testcase classname="tests.test_mathops" name="test_gcd[12-18-6]" file="tests/test_mathops.py" line="7"><failure message="x"/></testcase>
<testcase classname="tests.test_mathops" name="test_lcm[0-3-0]" file="tests/test_mathops.py" line="9"><skipped message="s"/></testcase>
<testcase classname="tests.test_report" name="test_layout" file="tests/test_report.py" line="3" />
<testcase classname="tests.test_report" name="test_layout" file="tests/test_report.py" line="3"><error message="teardown"/></testcase>
</testsuite></testsuites>"""


def _unit(layout, kind, qualname):
    return next(u for u in enumerate_units(layout) if (u.kind, u.qualname) == (kind, qualname))


def test_junit_xunit1_maps_back_to_node_ids_and_outcomes():
    assert parse_junit(JUNIT) == {
        "tests/test_shapes.py::TestRectangle::test_area": True,
        "tests/test_mathops.py::test_gcd[12-18-6]": False,
        "tests/test_mathops.py::test_lcm[0-3-0]": False,  # skipped counts as not passing
        "tests/test_report.py::test_layout": False,  # an error at teardown fails the test
    }


def test_canaries_are_what_only_the_deleted_code_held():
    layout = read_layout(MINILIB)
    deletion = delete_unit(layout, _unit(layout, "feature", "slugify"), "stub")
    remaining = "\n".join(deletion.changed.values()).encode() + (MINILIB / "tests/test_textops.py").read_bytes()
    canaries = canaries_for(deletion, remaining, repo_image_tokens={b"unicodedata", b"normalize", b"combining"})
    assert {b"_fold_accents", b"_collapse_separators"} <= canaries.identifiers
    assert b"slugify" not in canaries.identifiers  # the stub keeps the name
    assert b"normalize" not in canaries.identifiers  # present in the image anyway


def test_solution_patch_applies_to_the_single_commit_workspace(tmp_path):
    layout = read_layout(MINILIB)
    deletion = delete_unit(layout, _unit(layout, "module", "minilib.textops"), "file")
    workspace = build_workspace(MINILIB, deletion, tmp_path / "ws")
    assert not (workspace / "src/minilib/textops.py").exists()
    log = subprocess.run(["git", "rev-list", "--all", "--count"], cwd=workspace, capture_output=True, text=True)
    assert log.stdout.strip() == "1"
    (tmp_path / "fix.patch").write_text(solution_patch(deletion))
    subprocess.run(["git", "apply", str(tmp_path / "fix.patch")], cwd=workspace, check=True)
    for path in deletion.changed:
        assert (workspace / path).read_text() == (MINILIB / path).read_text()


def test_test_files_that_import_a_removed_name_run_whole():
    texts = {p: (MINILIB / p).read_text() for p in read_layout(MINILIB).test_files}
    assert importing_test_files(texts, {"median"}, set()) == {"tests/test_mathops.py"}
    assert importing_test_files(texts, set(), {"minilib.parsing"}) == {"tests/test_parsing.py"}
    selected = ["tests/test_mathops.py::test_median_odd", "tests/test_textops.py::test_title_case_single_word"]
    assert pytest_arguments(selected, {"tests/test_mathops.py"}) == ["tests/test_mathops.py", selected[1]]
