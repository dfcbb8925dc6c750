"""OpenEnv's wire base models (Action, Observation, State), without OpenEnv's server.

`openenv.core.env_server.types` needs only pydantic, but importing it runs its package's `__init__`, which imports
the HTTP server, fastmcp and gradio: seconds of every process that imports `proto` (the CLI, the trainer). The
module is loaded here under its own name, so that when the server does import the package, `from .types import ...`
finds this very module and the classes stay one and the same (openenv is pinned in pyproject.toml).

The same package `__init__` also imports OpenEnv's gradio web UI, which regrow never serves (it has its own
dashboard): `leave_out_openenv_web_ui` spares the processes that import OpenEnv's server or client those seconds.
"""

import importlib.util
import os
import sys
from types import ModuleType

TYPES_MODULE = "openenv.core.env_server.types"
WEB_UI_MODULE = "openenv.core.env_server.web_interface"
# OpenEnv's own switch for its web UI (create_app reads it); when it is on, the UI is left in.
WEB_UI_SWITCH = "ENABLE_WEB_INTERFACE"


def leave_out_openenv_web_ui() -> bool:
    """Make OpenEnv's package `__init__` skip its gradio web UI (about 2.5 s a process), unless ENABLE_WEB_INTERFACE
    asks for it. The `__init__` imports the UI under `except ModuleNotFoundError`, which a None in sys.modules raises.
    Call before anything imports `openenv.core`; returns whether the UI is left out."""
    if os.environ.get(WEB_UI_SWITCH, "false").lower() in ("true", "1", "yes"):
        return False
    sys.modules.setdefault(WEB_UI_MODULE, None)  # type: ignore[arg-type]
    return sys.modules[WEB_UI_MODULE] is None


def _types_module() -> ModuleType:
    if TYPES_MODULE in sys.modules:
        return sys.modules[TYPES_MODULE]
    package = importlib.util.find_spec("openenv")  # a top-level spec imports nothing
    if package is None or not package.submodule_search_locations:
        raise ImportError("the openenv package is not installed: pip install regrow installs the version it pins")
    location = f"{package.submodule_search_locations[0]}/core/env_server/types.py"
    spec = importlib.util.spec_from_file_location(TYPES_MODULE, location)
    if spec is None or spec.loader is None:
        raise ImportError(f"openenv has no {location}: regrow needs the openenv version pinned in its pyproject.toml")
    module = importlib.util.module_from_spec(spec)
    sys.modules[TYPES_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[TYPES_MODULE]
        raise
    return module


_types = _types_module()
Action = _types.Action
Observation = _types.Observation
State = _types.State
