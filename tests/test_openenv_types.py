"""proto's OpenEnv base models: loaded without OpenEnv's server, and the very classes that server uses."""

import subprocess
import sys

HEAVY = ("gradio", "fastmcp", "openenv.core.env_server.http_server")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_proto_and_the_cli_loads_no_part_of_openenvs_server():
    """`import regrow.cli` took 8.9 s on a loaded machine, 7.7 s of it gradio and fastmcp by way of proto."""
    loaded = _run(f"import sys, proto, regrow.cli\nprint([name for name in {HEAVY!r} if name in sys.modules])")
    assert loaded == "[]"


def test_the_server_and_the_client_load_without_openenvs_gradio_ui_and_share_protos_classes():
    """OpenEnv's package `__init__` imported its gradio web UI in every server, trainer and test process (~2.5 s); its
    server, imported after proto, must still use proto's very Action and Observation (one process checks both)."""
    code = (
        "import sys\n"
        "import proto.actions, proto.observations\n"
        "import env_server.app, trainer_client.env.client\n"
        "import openenv.core.env_server as server\n"
        "import openenv.core.env_server.types as types\n"
        "print('gradio' in sys.modules, 'openenv.core.env_server.http_server' in sys.modules,"
        " server.Action is types.Action is proto.actions.Action,"
        " server.Observation is types.Observation is proto.observations.Observation,"
        " issubclass(proto.ToolCall, server.Action), issubclass(proto.CodingObservation, server.Observation))"
    )
    assert _run(code) == "False True True True True True"


def test_enable_web_interface_keeps_openenvs_web_ui():
    """With OpenEnv's own switch on, its package `__init__` imports the UI as it always has (nothing is blocked)."""
    code = (
        "import os, sys\n"
        "os.environ['ENABLE_WEB_INTERFACE'] = 'true'\n"
        "from proto.openenv_types import WEB_UI_MODULE, leave_out_openenv_web_ui\n"
        "print(leave_out_openenv_web_ui(), WEB_UI_MODULE in sys.modules)"
    )
    assert _run(code) == "False False"
