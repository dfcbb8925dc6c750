"""Programs the grader runs inside a grading container: the launcher and the two children it starts, and the probe
that lists the image's pytest plugins.

The launcher and its children are shipped as files into a folder that belongs to root, the probe as `python -c` text;
all run with the repository's own interpreter, so they use the standard library alone (and pytest, in the test child).
"""
