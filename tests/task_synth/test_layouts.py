"""Where real projects keep their code: src/ and flat packages, PEP 420 namespaces, and single-module projects."""

from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout
from tests.task_synth.written_repos import write_files as _write

FUNCTION = "def double(x):\n    y = x * 2\n    z = y + 0\n    return z\n"


def test_a_single_module_project_is_its_own_package(tmp_path):
    root = _write(tmp_path, {"six.py": FUNCTION, "test_six.py": "import six\n", "setup.py": "", "conftest.py": ""})
    layout = read_layout(root)
    assert layout.modules == {"six.py": "six"}
    assert layout.top_packages == ["six"]
    assert layout.test_files == ["conftest.py", "test_six.py"]


def test_a_single_module_is_never_deleted_whole(tmp_path):
    root = _write(tmp_path, {"six.py": FUNCTION, "test_six.py": "import six\n"})
    assert [(unit.qualname, unit.kind) for unit in enumerate_units(read_layout(root))] == [("double", "function")]


def test_a_single_module_under_src_counts_too(tmp_path):
    root = _write(tmp_path, {"src/one.py": FUNCTION, "tests/test_one.py": "import one\n"})
    assert read_layout(root).modules == {"src/one.py": "one"}


def test_top_level_scripts_do_not_count_beside_a_package(tmp_path):
    root = _write(tmp_path, {"pkg/__init__.py": "", "pkg/core.py": FUNCTION, "tasks.py": "", "tests/test_core.py": ""})
    assert read_layout(root).modules == {"pkg/__init__.py": "pkg", "pkg/core.py": "pkg.core"}


def test_a_namespace_directory_is_part_of_the_module_name(tmp_path):
    root = _write(
        tmp_path, {"jaraco/functools/__init__.py": FUNCTION, "jaraco/functools/more.py": "", "test_functools.py": ""}
    )
    layout = read_layout(root)
    assert layout.modules == {
        "jaraco/functools/__init__.py": "jaraco.functools",
        "jaraco/functools/more.py": "jaraco.functools.more",
    }
    # Coverage and the import check name the regular package, not the namespace.
    assert layout.top_packages == ["jaraco.functools"]


def test_a_namespace_under_src_stops_at_src(tmp_path):
    root = _write(
        tmp_path, {"src/acme/tools/__init__.py": "", "src/acme/tools/cut.py": FUNCTION, "tests/test_cut.py": ""}
    )
    layout = read_layout(root)
    assert layout.modules["src/acme/tools/cut.py"] == "acme.tools.cut"
    assert layout.top_packages == ["acme.tools"]


def test_src_and_flat_packages_keep_their_plain_names(tmp_path):
    root = _write(
        tmp_path,
        {"src/a/__init__.py": "", "src/a/x.py": "", "b/__init__.py": "", "b/y/__init__.py": "", "tests/test_a.py": ""},
    )
    layout = read_layout(root)
    assert layout.modules == {
        "src/a/__init__.py": "a",
        "src/a/x.py": "a.x",
        "b/__init__.py": "b",
        "b/y/__init__.py": "b.y",
    }
    assert layout.top_packages == ["a", "b"]
