"""Grading a submission: the verdict comes from outside every process that runs the submission's code.

`submission.grade` is the path of one `submit`; the modules beside it are its steps.
"""

from env_server.grading.pristine import PristineCache
from env_server.grading.submission import grade
from env_server.grading.verdict import failing_summary

__all__ = ["PristineCache", "failing_summary", "grade"]
