"""Canary selection and the solution patch (pure Python, no Docker)."""

import subprocess
from pathlib import Path

from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout
from task_synth.store.workspace import build_workspace, solution_patch
from task_synth.validation.canary_scan import canaries_for
from task_synth.validation.verdict import importing_test_files

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"


def _unit(layout, kind, qualname):
    return next(u for u in enumerate_units(layout) if (u.kind, u.qualname) == (kind, qualname))


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


def test_test_files_that_import_a_removed_name_are_predicted_whole():
    texts = {p: (MINILIB / p).read_text() for p in read_layout(MINILIB).test_files}
    assert importing_test_files(texts, {"median"}, set()) == {"tests/test_mathops.py"}
    assert importing_test_files(texts, set(), {"minilib.parsing"}) == {"tests/test_parsing.py"}


def test_a_copy_of_the_deleted_code_inside_a_wheel_is_scanned_and_found_vendored(tmp_path):
    import io
    import zipfile

    from task_synth.validation.canary_scan import ImageIndex, is_vendored, scan_files, vendored_copy, with_zip_members
    from task_synth.validation.task_checks import removed_source

    layout = read_layout(MINILIB)
    deletion = delete_unit(layout, _unit(layout, "feature", "slugify"), "remove")
    original = (MINILIB / deletion.unit.path).read_bytes()
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:  # compressed: a plain byte search sees nothing
        archive.writestr("vendor/textops.py", original)
    members = dict(with_zip_members("usr/share/python-wheels/vendor-1-py3-none-any.whl", wheel.getvalue()))
    assert members["usr/share/python-wheels/vendor-1-py3-none-any.whl!vendor/textops.py"] == original
    canaries = canaries_for(deletion, b"", set())
    hits = scan_files([("usr/share/python-wheels/vendor-1-py3-none-any.whl", wheel.getvalue())], canaries, set(), [])
    assert "usr/share/python-wheels/vendor-1-py3-none-any.whl!vendor/textops.py" in [hit.path for hit in hits]
    # An image that holds the wheel holds most of the deleted lines: a vendored copy, whatever the canaries.
    index = ImageIndex()
    for _, data in members.items():
        index.add(data)
    found, total = vendored_copy(removed_source(deletion), index)
    assert total >= 3 and is_vendored(found, total)
    assert not is_vendored(*vendored_copy(removed_source(deletion), ImageIndex()))


def test_a_damaged_zip_is_scanned_as_plain_bytes():
    from task_synth.validation.canary_scan import with_zip_members

    assert list(with_zip_members("opt/x.whl", b"PK\x03\x04 not really")) == [("opt/x.whl", b"PK\x03\x04 not really")]


def test_a_unit_too_small_for_a_distinctive_name_is_marked_by_its_lines():
    from task_synth.validation.canary_scan import ImageIndex, scan_files

    layout = read_layout(MINILIB)
    deletion = delete_unit(layout, _unit(layout, "function", "lcm"), "stub")
    remaining = b"\n".join((text or "").encode() for text in deletion.changed.values())
    bare = canaries_for(deletion, remaining, {b"product"})  # the image uses the name `product` anyway
    assert not bare.identifiers and not bare.literals
    assert b"return product // gcd(a, b)" in bare.lines
    copy = (MINILIB / deletion.unit.path).read_bytes()
    assert [hit.path for hit in scan_files([("root/.cache/old/mathops.py", copy)], bare, set(), [])] == [
        "root/.cache/old/mathops.py"
    ]
    index = ImageIndex()
    index.add(copy)  # a line the image holds anyway marks nothing
    assert b"return product // gcd(a, b)" not in canaries_for(deletion, remaining, {b"product"}, index.lines).lines


class _Image:
    """An engine that holds one image, read whole on every `image_files` call: the calls are counted."""

    def __init__(self, files: dict[str, bytes], image_id: str = "sha256:aa"):
        self.files, self.id, self.reads = files, image_id, 0

    def image_id(self, image):
        return self.id

    def image_files(self, image):
        self.reads += 1
        yield from self.files.items()


def test_the_image_index_is_read_once_per_image_and_a_damaged_cache_is_read_again(tmp_path):
    from task_synth.validation.canary_scan import cached_index

    engine = _Image({"opt/venv/lib/python3.11/site-packages/minilib/ops.py": b"def clamp_range_value(): pass\n"})
    first, hits = cached_index(engine, "repo:1", ["minilib"], tmp_path)  # type: ignore[arg-type]
    again, hits_again = cached_index(engine, "repo:1", ["minilib"], tmp_path)  # type: ignore[arg-type]
    assert engine.reads == 1 and b"clamp_range_value" in again.tokens
    assert (again.tokens, again.lines, hits_again) == (first.tokens, first.lines, hits) and hits  # the copy is a hit

    engine.id = "sha256:bb"  # the tag now names a rebuilt image
    cached_index(engine, "repo:1", ["minilib"], tmp_path)  # type: ignore[arg-type]
    assert engine.reads == 2
    for cached in (tmp_path / "image-index").iterdir():
        cached.write_bytes(b"not a pickle")
    index, _ = cached_index(engine, "repo:1", ["minilib"], tmp_path)  # type: ignore[arg-type]
    assert engine.reads == 3 and b"clamp_range_value" in index.tokens
    assert not list((tmp_path / "image-index").glob("*.partial"))


def test_a_stopped_run_stops_the_image_read_at_the_next_file():
    """A run stopped during its baseline waited for the whole image read beside it: minutes under load."""
    import threading

    import pytest

    from task_synth.validation.canary_scan import ScanStopped, index_image

    stop = threading.Event()
    engine = _Image({f"opt/file{n}.py": b"x = 1\n" for n in range(1000)})
    read = []

    def files(image):
        for item in engine.files.items():
            read.append(item[0])
            if len(read) == 3:
                stop.set()
            yield item

    engine.image_files = files  # type: ignore[method-assign]
    with pytest.raises(ScanStopped):
        index_image(engine, "repo:1", ["minilib"], stop)  # type: ignore[arg-type]
    assert len(read) == 3  # the file read when the stop came is the last
