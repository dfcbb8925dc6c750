"""The graded change set as a unified diff: exact text for each kind of change, the cap, and that git applies it."""

import subprocess

from env_server.grading.change_set import ChangeSet, Entry, Tree
from env_server.grading.diff import submission_diff


def tree(kept: dict[str, bytes], not_kept: dict[str, int] | None = None) -> Tree:
    """A pristine tree keeping the bytes of `kept`, with `not_kept` present only as sizes."""
    entries = {path: Entry("file", size=len(data)) for path, data in kept.items()}
    entries.update({path: Entry("file", size=size) for path, size in (not_kept or {}).items()})
    return Tree(entries=entries, data=dict(kept))


def test_a_modified_file():
    pristine = tree({"calc/ops.py": b"def add(a, b):\n    pass\n\n\nX = 1\n"})
    changes = ChangeSet(written={"calc/ops.py": b"def add(a, b):\n    return a + b\n\n\nX = 1\n"})
    assert submission_diff(pristine, changes) == (
        "--- a/calc/ops.py\n"
        "+++ b/calc/ops.py\n"
        "@@ -1,5 +1,5 @@\n"
        " def add(a, b):\n"
        "-    pass\n"
        "+    return a + b\n"
        " \n"
        " \n"
        " X = 1\n"
    )


def test_a_new_file():
    changes = ChangeSet(written={"calc/new.py": b"A = 1\nB = 2\n"})
    assert submission_diff(tree({}), changes) == ("--- /dev/null\n+++ b/calc/new.py\n@@ -0,0 +1,2 @@\n+A = 1\n+B = 2\n")


def test_a_deleted_file_whose_text_is_kept():
    pristine = tree({"calc/old.py": b"A = 1\nB = 2\n"})
    changes = ChangeSet(deleted=["calc/old.py"])
    assert submission_diff(pristine, changes) == ("--- a/calc/old.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-A = 1\n-B = 2\n")


def test_a_deleted_file_whose_text_is_not_kept():
    changes = ChangeSet(deleted=["data/table.csv"])
    assert submission_diff(tree({}, {"data/table.csv": 1234}), changes) == (
        "--- a/data/table.csv\n+++ /dev/null\ndeleted, 1234 bytes\n"
    )


def test_a_binary_file_on_either_side():
    pristine = tree({"blob.py": b"\x00\x01", "text.py": b"A = 1\n"})
    changes = ChangeSet(written={"blob.py": b"\x00\x02", "text.py": b"\x00", "new.bin": b"a\x00b"})
    assert submission_diff(pristine, changes) == (
        "Binary files a/blob.py and b/blob.py differ\n"
        "Binary files /dev/null and b/new.bin differ\n"
        "Binary files a/text.py and b/text.py differ\n"
    )


def test_a_modified_file_whose_task_version_is_not_kept():
    changes = ChangeSet(written={"README.md": b"# Title\nnew text\n"})
    assert submission_diff(tree({}, {"README.md": 10}), changes) == (
        "--- a/README.md\n"
        "+++ b/README.md\n"
        "@@ the task's version of this file is not kept; its new text follows @@\n"
        "+# Title\n"
        "+new text\n"
    )


def test_a_missing_final_newline_is_marked_as_git_marks_it():
    pristine = tree({"a.py": b"A = 1\nB = 2"})
    changes = ChangeSet(written={"a.py": b"A = 1\nB = 3", "b.py": b"C = 1"})
    assert submission_diff(pristine, changes) == (
        "--- a/a.py\n"
        "+++ b/a.py\n"
        "@@ -1,2 +1,2 @@\n"
        " A = 1\n"
        "-B = 2\n"
        "\\ No newline at end of file\n"
        "+B = 3\n"
        "\\ No newline at end of file\n"
        "--- /dev/null\n"
        "+++ b/b.py\n"
        "@@ -0,0 +1 @@\n"
        "+C = 1\n"
        "\\ No newline at end of file\n"
    )


def test_non_utf8_bytes_are_replaced_not_fatal():
    changes = ChangeSet(written={"a.py": b"S = '\xff'\n"})
    assert submission_diff(tree({}), changes) == "--- /dev/null\n+++ b/a.py\n@@ -0,0 +1 @@\n+S = '\ufffd'\n"


def test_a_change_of_the_executable_bit_alone_is_said_not_hidden():
    pristine = tree({"run.py": b"A = 1\n"})
    changes = ChangeSet(written={"run.py": b"A = 1\n"}, executable={"run.py"})
    assert submission_diff(pristine, changes) == (
        "--- a/run.py\n+++ b/run.py\n@@ the text is unchanged; the executable bit is set @@\n"
    )


def test_a_cap_stops_at_a_whole_file_and_names_the_rest():
    files = {f"m{i:02}.py": b"X = 1\n" for i in range(14)}
    one = "--- /dev/null\n+++ b/m00.py\n@@ -0,0 +1 @@\n+X = 1\n"
    cap = 2 * len(one) + 10
    assert submission_diff(tree({}), ChangeSet(written=files), cap_chars=cap) == (
        one
        + one.replace("m00", "m01")
        + f"... diff cut at {cap} characters: 12 more file(s) not shown: "
        + ", ".join(f"m{i:02}.py" for i in range(2, 12))
        + "\n"
    )


def test_a_first_file_over_the_cap_is_cut_at_a_line_inside_it():
    changes = ChangeSet(written={"big.py": b"".join(b"X%d = 1\n" % i for i in range(100)), "small.py": b"Y = 1\n"})
    assert submission_diff(tree({}), changes, cap_chars=61) == (
        "--- /dev/null\n"
        "+++ b/big.py\n"
        "@@ -0,0 +1,100 @@\n"
        "+X0 = 1\n"
        "+X1 = 1\n"
        "... diff cut at 61 characters: 1 more file(s) not shown: small.py\n"
    )


def test_a_diff_within_the_cap_is_whole():
    changes = ChangeSet(written={"a.py": b"A = 1\n"})
    text = submission_diff(tree({}), changes)
    assert submission_diff(tree({}), changes, cap_chars=len(text)) == text


def test_an_empty_change_set_gives_no_text():
    assert submission_diff(tree({"a.py": b"A = 1\n"}), ChangeSet()) == ""


def test_git_applies_the_diff(tmp_path):
    pristine = tree({"pkg/mod.py": b"def f():\n    return 1\n", "pkg/gone.py": b"G = 1\n", "setup.cfg": b"[x]\n"})
    changes = ChangeSet(
        written={"pkg/mod.py": b"def f():\n    return 2\n", "pkg/added.py": b"A = 1"},
        deleted=["pkg/gone.py"],
    )
    for path, data in pristine.data.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    (tmp_path / "change.diff").write_text(submission_diff(pristine, changes))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    checked = subprocess.run(["git", "apply", "--check", "change.diff"], cwd=tmp_path, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    subprocess.run(["git", "apply", "change.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "pkg/mod.py").read_bytes() == changes.written["pkg/mod.py"]
    assert (tmp_path / "pkg/added.py").read_bytes() == b"A = 1"
    assert not (tmp_path / "pkg/gone.py").exists()


def test_two_sides_too_long_to_diff_quickly_are_summed_up_not_diffed():
    # Many repeated lines in a different order on both sides: difflib's slow case (150 000 lines took 10 s).
    old_lines = [f"{i % 1499}\n" for i in range(150_000)]
    new_lines = list(reversed(old_lines))
    old, new = "".join(old_lines).encode(), "".join(new_lines).encode()
    pristine = Tree(entries={"big.py": Entry("file", False, "d", len(old))}, data={"big.py": old})
    diff = submission_diff(pristine, ChangeSet(written={"big.py": new}))
    assert diff == "--- a/big.py\n+++ b/big.py\n@@ 150000 lines became 150000: too many to diff here @@\n"
