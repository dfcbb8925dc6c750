"""A repository that pytest itself imports: a deletion reaches the tests, not pytest's own copy of the package."""

from pathlib import Path

import pytest

from tests.task_synth.written_repos import committed_clone, prepared_clone

# pytest imports iniconfig when it starts, and takes any version from 1.0.1 on: this stand-in, made here, is one.
INICONFIG = {
    "pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "iniconfig"
        version = "9.0.0"

        [tool.setuptools.packages.find]
        where = ["src"]
        """,
    "src/iniconfig/__init__.py": """\
        class ParseError(Exception):
            def __init__(self, path, lineno, msg):
                super().__init__(path, lineno, msg)
                self.path, self.lineno, self.msg = path, lineno, msg


        def strip_comment(line):
            for mark in "#;":
                line = line.split(mark, 1)[0]
            return line.strip()


        def parse_lines(path, lines):
            sections, current = {}, None
            for lineno, raw in enumerate(lines, 1):
                line = strip_comment(raw)
                if not line:
                    continue
                if line.startswith("[") and line.endswith("]"):
                    current = sections.setdefault(line[1:-1].strip(), {})
                elif "=" in line and current is not None:
                    name, value = line.split("=", 1)
                    current[name.strip()] = value.strip()
                else:
                    raise ParseError(path, lineno, f"cannot read {raw!r}")
            return sections


        class SectionWrapper:
            def __init__(self, config, name):
                self.config, self.name = config, name

            def __getitem__(self, key):
                return self.config.sections[self.name][key]

            def items(self):
                return self.config.sections[self.name].items()


        class IniConfig:
            def __init__(self, path, data=None):
                self.path = str(path)
                if data is None:
                    with open(self.path, encoding="utf-8") as handle:
                        data = handle.read()
                self.sections = parse_lines(self.path, data.splitlines())

            def get(self, section, name, default=None):
                return self.sections.get(section, {}).get(name, default)

            def __contains__(self, section):
                return section in self.sections

            def __getitem__(self, section):
                return SectionWrapper(self, section)
        """,
    "tests/test_iniconfig.py": """\
        import pytest

        from iniconfig import IniConfig, ParseError, strip_comment


        def test_strip_comment_drops_both_marks():
            assert strip_comment("a = 1  # one") == "a = 1"
            assert strip_comment("; all of it") == ""


        def test_sections_and_values_are_read():
            config = IniConfig("x.ini", data="[tool]\\nname = demo\\nlevel = 3\\n")
            assert config.get("tool", "name") == "demo" and config.get("tool", "level") == "3"


        def test_a_missing_value_gives_the_default():
            assert IniConfig("x.ini", data="[tool]\\n").get("tool", "nothing", "none") == "none"


        def test_membership_names_sections():
            config = IniConfig("x.ini", data="[a]\\n[b]\\n")
            assert "a" in config and "c" not in config


        def test_a_stray_line_is_a_parse_error_with_its_line():
            with pytest.raises(ParseError) as error:
                IniConfig("x.ini", data="[a]\\n\\nstray\\n")
            assert error.value.lineno == 3
        """,
}


@pytest.fixture
def iniconfig_clone(tmp_path) -> Path:
    return committed_clone(tmp_path / "iniconfig", INICONFIG)


@pytest.mark.docker
def test_a_deletion_in_a_package_pytest_imports_fails_the_tests_that_use_it(
    iniconfig_clone, tmp_path, docker_backend, base_image
):
    """Candidates ran through a fork server that had imported the package with pytest, before the deletion: its
    children kept the original modules, and no test failed (pluggy 1.5.0: 20 of 20 candidates "no f2p")."""
    from task_synth.candidates.deletion import delete_unit
    from task_synth.candidates.units import enumerate_units
    from task_synth.settings import SynthSettings
    from task_synth.validation.verdict import validate

    settings = SynthSettings(seed=0)
    with prepared_clone(iniconfig_clone, settings, docker_backend, tmp_path) as context:
        assert context.baseline.runner_packages == ["iniconfig"]
        [unit] = [u for u in enumerate_units(context.layout) if u.qualname == "parse_lines"]
        with context.sandbox() as sb:
            verdict = validate(sb, context.baseline, delete_unit(context.layout, unit, "stub"), "iniconfig", settings)
        # every test that reads a section fails (a trivial stand-in passes some of them, kept out of F2P), and none
        # other: pytest ran on its own copy of the package and reported each test
        reads = {
            "tests/test_iniconfig.py::test_sections_and_values_are_read",
            "tests/test_iniconfig.py::test_a_missing_value_gives_the_default",
            "tests/test_iniconfig.py::test_membership_names_sections",
            "tests/test_iniconfig.py::test_a_stray_line_is_a_parse_error_with_its_line",
        }
        assert verdict.rejection is None and verdict.fail_to_pass, verdict
        assert set(verdict.fail_to_pass) | set(verdict.trivially_passed) == reads, verdict
