"""The wheelhouse is resolved by the host's Python but installed by the image's: a wheel that asks for a newer patch
release than the image has (soupsieve 4 wants >=3.11.5; Debian's is 3.11.2) is pinned back, or the image build fails
and the repository gives no task (tomlkit, through furo and beautifulsoup4)."""

import re
import zipfile
from pathlib import Path

import pytest

from sandbox import DockerBackend
from sandbox.lifecycle.base_image import BASE_IMAGE
from task_synth.repository.image_python import image_python_version, incompatible_wheels, wheel_requires_python
from task_synth.repository.wheelhouse import PINS_FILE, build_wheelhouse


def _wheel(folder: Path, name: str, version: str, requires: str | None) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += f"Requires-Python: {requires}\n" if requires else ""
    with zipfile.ZipFile(path, "w") as archive:
        description = "\nlong description: Requires-Python: >=9\n"
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata + description)
    return path


def test_wheels_whose_requires_python_excludes_the_image_are_found(tmp_path):
    _wheel(tmp_path, "soupsieve", "4.1.3", ">=3.11.5")
    _wheel(tmp_path, "idna", "3.10", ">=3.6")
    _wheel(tmp_path, "six", "1.17.0", None)
    _wheel(tmp_path, "odd", "1.0", "not a specifier")
    assert incompatible_wheels(tmp_path, "3.11.2") == {"soupsieve": "4.1.3 (Requires-Python >=3.11.5)"}
    assert incompatible_wheels(tmp_path, "3.11.7") == {}


def test_the_metadata_header_is_read_not_the_description(tmp_path):
    wheel = _wheel(tmp_path, "idna", "3.10", None)
    assert wheel_requires_python(wheel) == ("idna", "3.10", None)


@pytest.mark.pypi
def test_a_dependency_that_dropped_the_images_python_is_pinned_back(tmp_path):
    root = tmp_path / "tiny"
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "tiny"\nversion = "0.1"\ndependencies = ["soupsieve"]\n'
    )
    wheelhouse = build_wheelhouse(root, tmp_path / "cache", python_version="3.11.2")
    assert incompatible_wheels(wheelhouse, "3.11.2") == {}
    held = [wheel for wheel in wheelhouse.glob("soupsieve-*.whl")]
    assert len(held) == 1, held  # the newer release is gone, not left beside the pinned one
    pins = (wheelhouse / PINS_FILE).read_text().split()
    assert pins and all(pin.startswith("soupsieve<=") for pin in pins), pins  # what was held back is on record


@pytest.mark.docker
def test_the_base_images_python_is_read_once_and_cached(tmp_path):
    version = image_python_version(DockerBackend(), BASE_IMAGE, tmp_path)
    assert version and re.fullmatch(r"3\.\d+\.\d+", version)
    assert BASE_IMAGE in (tmp_path / "image-python.json").read_text()
    assert image_python_version(DockerBackend(), BASE_IMAGE, tmp_path) == version
