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


def test_the_server_package_imported_after_proto_shares_its_classes():
    code = (
        "import proto.actions, proto.observations\n"
        "import openenv.core.env_server as server\n"
        "import openenv.core.env_server.types as types\n"
        "print(server.Action is types.Action is proto.actions.Action,"
        " server.Observation is types.Observation is proto.observations.Observation,"
        " issubclass(proto.ToolCall, server.Action), issubclass(proto.CodingObservation, server.Observation))"
    )
    assert _run(code) == "True True True True"
