"""The base image recipe: the apt mirror comes from the machine's own sources."""

import pytest

from sandbox.errors import SandboxError
from sandbox.lifecycle.base_image import ImageSettings, find_apt_mirror


def _settings(tmp_path, suite="bookworm"):
    return ImageSettings(apt_dir=tmp_path, suite=suite)


def test_mirror_is_read_from_deb822_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main "
        "contrib\n"
    )
    source = find_apt_mirror(_settings(tmp_path))
    assert (source.uri, source.suite) == ("http://mirror.example/debian", "bookworm")


def test_mirror_is_read_from_one_line_sources(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main non-free\n"
    )
    assert find_apt_mirror(_settings(tmp_path)).uri == "http://one.example/debian"


def test_disabled_and_foreign_entries_are_skipped(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "b.list").write_text("deb http://other.example/apt nodistro main\n")
    with pytest.raises(SandboxError, match="REGROW_IMAGES_APT_MIRROR"):
        find_apt_mirror(_settings(tmp_path))


def test_base_image_has_python_git_timeout_and_the_agent_user(docker_backend, base_image):
    with docker_backend.create(base_image) as sb:
        # --without-pip: ensurepip's install of pip ran past 30 s under CI load, and no sandbox venv needs pip
        result = sb.exec(
            "python3 -m venv --without-pip /tmp/v && /tmp/v/bin/python -c 'import sys; print(sys.prefix)' && "
            "git --version && timeout --version | head -1 && id agent && stat -c %U /workspace",
            timeout=120,
        )
        assert result.exit_code == 0, result.stderr
        assert "/tmp/v\n" in result.stdout and "uid=1000(agent)" in result.stdout
        assert result.stdout.strip().endswith("agent")


def test_every_default_base_image_is_the_one_regrow_images_build_makes():
    """compose, the service image and the README name the tag `regrow images build` builds (a fresh engine has no
    other)."""
    import re
    from pathlib import Path

    from sandbox.lifecycle.base_image import BASE_IMAGE

    root = Path(__file__).parents[2]
    named = {
        "compose.yaml": re.findall(r"regrow/base:[\w.-]+", (root / "compose.yaml").read_text()),
        "deploy/app.Dockerfile": re.findall(r"regrow/base:[\w.-]+", (root / "deploy" / "app.Dockerfile").read_text()),
        "deploy/build-app-image.sh": re.findall(
            r"regrow/base:[\w.-]+", (root / "deploy" / "build-app-image.sh").read_text()
        ),
        "README.md": re.findall(r"\"(regrow/base:[\w.-]+)\"", (root / "README.md").read_text()),
    }
    assert {place: set(tags) for place, tags in named.items()} == {place: {BASE_IMAGE} for place in named}
