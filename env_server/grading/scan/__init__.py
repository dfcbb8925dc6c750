"""The tamper scan: a submission's Python changes searched for code that reaches into the test machinery."""
