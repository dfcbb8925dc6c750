"""The store stage: a deletion assembled into a task (workspace, statement, record, twins, split) and written out; what
validation decided reaches it as a CheckedTask (task_synth/task_evidence.py), never by importing validation."""
