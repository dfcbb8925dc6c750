"""The store stage: a validated deletion built into a task (statement, workspace, twins, split) and written out."""
