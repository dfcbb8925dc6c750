"""The validation stage: the baseline, test runs in sandboxes, stand-ins, recorded checks, mutants, canary scans, and
the last checks of a finished task (task_checks.py): it decides, and the store writes."""
