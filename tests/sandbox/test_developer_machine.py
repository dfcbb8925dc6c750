"""The sandbox looks like a developer's machine to a test suite: time zones, a UTF-8 locale, HOME, a fixed hash seed."""

import pytest

from env_server.settings import ServerSettings
from env_server.stepping.tools import call_tool
from proto.actions import RunArgs

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sandbox(docker_backend, base_image):
    with docker_backend.create(base_image) as sb:
        yield sb


def test_time_zones_are_installed(sandbox):
    result = sandbox.exec("""python3 -c 'import zoneinfo; print(zoneinfo.ZoneInfo("Europe/Paris"))'""")
    assert result.exit_code == 0 and result.stdout == "Europe/Paris\n", result.stderr
    assert sandbox.exec("test -f /usr/share/zoneinfo/Europe/Paris").exit_code == 0


def test_utf8_locales_exist_and_the_default_one_is_utf8(sandbox):
    assert {"C.utf8", "en_US.utf8"} <= set(sandbox.exec("locale -a").stdout.split())
    script = (
        "import locale; locale.setlocale(locale.LC_ALL, ''); locale.setlocale(locale.LC_ALL, 'en_US.UTF-8'); "
        "print(locale.getpreferredencoding())"
    )
    result = sandbox.exec(["python3", "-c", script])
    assert result.exit_code == 0 and result.stdout == "UTF-8\n", result.stderr


def test_home_is_the_agents_own_writable_directory(sandbox):
    result = sandbox.exec(
        'echo "$HOME" && touch "$HOME/.probe" && python3 -c "import pathlib; print(pathlib.Path.home())"'
    )
    assert result.exit_code == 0 and result.stdout == "/home/agent\n/home/agent\n", result.stderr


def test_the_agents_run_hashes_strings_with_seed_zero(sandbox):
    command = "echo $PYTHONHASHSEED; python3 -c 'print(hash(\"regrow\"))'"
    first, second = (call_tool(sandbox, RunArgs(command=command), ServerSettings()) for _ in range(2))
    assert first.output.splitlines()[0] == "0" and first.output == second.output
