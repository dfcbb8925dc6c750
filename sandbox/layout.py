"""Where things are inside every sandbox: the base image makes them, and every part that reaches in uses these."""

WORKSPACE = "/workspace"  # the repository under work: the agent's, the tests', the grader's
AGENT_USER = "agent"
AGENT_UID = 1000  # of AGENT_USER; files written through the engine's API are chowned to it
AGENT_HOME = "/home/agent"

# What tools leave behind in a tree, as glob patterns of one path component: never graded, compared or shipped.
CACHE_NAMES = (
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".coverage",
    ".coverage.*",
    ".tox",
    ".nox",
)
