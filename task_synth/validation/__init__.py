"""The validation stage: the baseline, test runs in sandboxes, stand-ins, recorded checks, mutants and canary scans."""
