"""Programs the grader runs inside a grading container: the launcher and the two children it starts.

They are shipped as files into a folder that belongs to root and run with the repository's own interpreter, so they
use the standard library alone (and pytest, in the test child).
"""
