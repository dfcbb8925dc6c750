"""A graded episode's submission as the trace store keeps it: its change set, compressed, so that `regrow traces
regrade` can grade exactly what was graded (older episodes are rebuilt from their diff: grading/applied_diff.py).
"""

from __future__ import annotations

import base64
import json
import zlib

from env_server.grading.applied_diff import NotReplayable
from env_server.grading.change_set import ChangeSet

FORMAT_VERSION = 1


def encode_change_set(changes: ChangeSet) -> bytes:
    """The written files (their bytes), executable bits and deleted paths as zlib'd JSON; refusals are not kept."""
    document = {
        "version": FORMAT_VERSION,
        "written": {path: base64.b64encode(data).decode("ascii") for path, data in sorted(changes.written.items())},
        "executable": sorted(changes.executable),
        "deleted": sorted(changes.deleted),
    }
    return zlib.compress(json.dumps(document, separators=(",", ":")).encode("utf-8"), 6)


def decode_change_set(blob: bytes) -> ChangeSet:
    """The change set `encode_change_set` wrote."""
    document = json.loads(zlib.decompress(blob))
    if document.get("version") != FORMAT_VERSION:
        raise NotReplayable(
            f"the stored change set has format {document.get('version')!r}, this regrow reads {FORMAT_VERSION}: "
            "re-grade with the regrow that recorded it"
        )
    return ChangeSet(
        written={path: base64.b64decode(text) for path, text in document["written"].items()},
        executable=set(document["executable"]),
        deleted=list(document["deleted"]),
    )
