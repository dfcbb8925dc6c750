"""The demonstrator's calls: a solution patch played as the tools an agent has (no engine)."""

import pytest

from proto.tasks import TaskRecord
from trainer_client.rollout.demonstrator import DemoError, run_tests_call, solution_calls

TWO_FILES = """diff --git a/pkg/ops.py b/pkg/ops.py
index 1111111..2222222 100644
--- a/pkg/ops.py
+++ b/pkg/ops.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    raise NotImplementedError
+    return a + b
@@ -10,2 +10,3 @@ def mul(a, b):
 def clamp(value, low, high):
-    raise NotImplementedError
+    low, high = sorted((low, high))
+    return max(low, min(value, high))
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+X = 1
+Y = 2
"""


def test_a_patch_is_a_read_then_an_edit_per_hunk_and_a_new_file_is_written_whole():
    calls = [(call.tool, call.args) for call in solution_calls(TWO_FILES)]
    assert calls == [
        ("read_file", {"path": "pkg/ops.py"}),
        (
            "edit_file",
            {
                "path": "pkg/ops.py",
                "old": "def add(a, b):\n    raise NotImplementedError\n",
                "new": "def add(a, b):\n    return a + b\n",
            },
        ),
        (
            "edit_file",
            {
                "path": "pkg/ops.py",
                "old": "def clamp(value, low, high):\n    raise NotImplementedError\n",
                "new": "def clamp(value, low, high):\n    low, high = sorted((low, high))\n"
                "    return max(low, min(value, high))\n",
            },
        ),
        ("write_file", {"path": "pkg/new.py", "content": "X = 1\nY = 2\n"}),
    ]


@pytest.mark.parametrize(
    "patch",
    [
        "",
        "not a diff at all\n",
        "diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n",
    ],
)
def test_a_patch_the_tools_cannot_play_is_refused_with_why(patch):
    with pytest.raises(DemoError):
        solution_calls(patch)


def test_the_run_step_names_the_tests_in_the_workspace_quoted(monkeypatch):
    record = TaskRecord.model_construct(
        test_command='python -m pytest -o addopts=""',
        FAIL_TO_PASS=["tests/test_x.py::test_a[1 2]", "hidden::pkg.f #1", "tests/test_x.py::test_b"],
    )
    assert run_tests_call(record).args["command"] == (
        "python -m pytest -o addopts= 'tests/test_x.py::test_a[1 2]' tests/test_x.py::test_b"
    )
