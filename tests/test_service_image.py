"""How the service image is made (no engine): the build script builds what compose.yaml names, and the wheelhouse
loses only what openenv's web interface alone needs."""

import importlib.util
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).parent.parent


def _trim_wheelhouse():
    spec = importlib.util.spec_from_file_location("trim_wheelhouse", ROOT / "deploy" / "trim_wheelhouse.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_build_script_builds_the_image_compose_names_from_its_dockerfile():
    build = yaml.safe_load((ROOT / "compose.yaml").read_text())["x-regrow-image"]
    script = (ROOT / "deploy" / "build-app-image.sh").read_text()
    assert re.search(r"tag=\$\{1:-(\S+)\}", script).group(1) == build["image"]
    assert f"--file {build['build']['dockerfile']}" in script
    assert "BASE_IMAGE=$base" in script and set(build["build"]["args"]) == {"BASE_IMAGE"}


def test_only_what_openenvs_web_interface_alone_needs_leaves_the_wheelhouse(tmp_path):
    trim = _trim_wheelhouse()
    needed, trimmed = trim.closure("regrow", set()), trim.closure("regrow", trim.UNUSED)
    assert {"gradio", "pandas", "pillow"} <= needed - trimmed
    # what regrow itself loads stays, and so does what another requirement needs too (mcp: python-multipart)
    assert {"openenv", "fastapi", "fastmcp", "pyarrow", "grpcio", "python-multipart", "huggingface-hub"} <= trimmed
    for name in (
        "gradio-6.0.0-py3-none-any.whl",
        "pandas-3.0-cp311-cp311-linux_x86_64.whl",
        "fastapi-1-py3-none-any.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    trim.main(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fastapi-1-py3-none-any.whl"]
