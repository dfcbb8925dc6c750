"""Feature-deletion task synthesis: repository -> validated, leak-free RL tasks with their images.

    from task_synth import synthesize, SynthSettings
    report = synthesize("path/or/git-url", Path("store"), SynthSettings(max_tasks=3, modes=["stub"]))

The names load on first use, so that `regrow --help` does not import Docker and libcst.
"""

from importlib import import_module

_EXPORTS = {
    "synthesize": "task_synth.pipeline",
    "SynthReport": "task_synth.pipeline",
    "SynthSettings": "task_synth.settings",
    "SynthError": "task_synth.errors",
    "export_parquet": "task_synth.store.store_writer",
    "read_records": "proto.task_files",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'task_synth' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
