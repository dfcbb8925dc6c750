"""What the Docker socket proxy lets through: the engine endpoints regrow uses, with bodies that cannot reach the
host."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from enum import Enum
from urllib.parse import parse_qsl, unquote, urlencode

from sandbox.lifecycle.owner import MANAGED_LABEL

MANAGED_FILTER = f"{MANAGED_LABEL}=1"
_ASK_DIRECT = "run it against the engine directly, outside the proxy, if you really need it"
_VERSION = re.compile(r"^/v1\.\d{1,3}(?=/)")
_PATH_CHARS = re.compile(r"^[A-Za-z0-9/_.:@+-]*$")
_REF = r"(?P<ref>[A-Za-z0-9][A-Za-z0-9_.-]*)"


class Scope(Enum):
    """Whose permission a request needs, checked against the engine before it is forwarded."""

    NONE = "none"
    CONTAINER = "container"  # the container must carry regrow.managed=1
    EXEC = "exec"  # the exec's container must carry regrow.managed=1


class Refused(Exception):
    """A request the proxy answers itself: 403 for policy, 400/413 for malformed or oversized requests."""

    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


def refusal(method: str, path: str, why: str, remedy: str, status: int = 403) -> Refused:
    return Refused(f"regrow docker proxy refused {method} {path}: {why}; {remedy}", status)


@dataclass(frozen=True)
class Route:
    """One allowed request, with the pieces needed to check it and to rebuild its target."""

    method: str
    path: str  # decoded, without the /v1.NN prefix
    version: str  # "/v1.44" or ""
    query: str  # canonical re-encoding of what was checked
    scope: Scope = Scope.NONE
    ref: str | None = None
    body: str | None = None  # "container_create" or "exec_create": the body is checked as JSON
    upgrade: bool = False  # the one request that may switch to a raw stream
    foreign_state_only: bool = False  # an unmanaged container is answered with its Id and State alone

    def target(self, ref: str | None = None) -> str:
        """The request target to send upstream, with the reference replaced by the engine's full id."""
        parts = self.path.split("/")
        if ref is not None and self.ref is not None:
            parts[2] = ref  # /containers/{ref}/... and /exec/{ref}/...
        path = "/".join(parts)
        return f"{self.version}{path}" + (f"?{self.query}" if self.query else "")


_CONTAINER_VERBS = {
    ("POST", "start"),
    ("POST", "kill"),
    ("POST", "stop"),
    ("POST", "wait"),
    ("GET", "json"),
    ("GET", "archive"),
    ("PUT", "archive"),
    ("HEAD", "archive"),
    ("POST", "exec"),
}
_CONTAINER_PATH = re.compile(rf"^/containers/{_REF}(?:/(?P<verb>[a-z]+))?$")
_EXEC_PATH = re.compile(rf"^/exec/{_REF}/(?P<verb>start|json)$")
_IMAGE_PATH = re.compile(r"^/images/(?P<name>.+)/json$")


def _split_target(method: str, target: str) -> tuple[str, str, str]:
    """(version prefix, decoded path, canonical query) of a request target, refusing ambiguous spellings."""
    raw_path, _, raw_query = target.partition("?")
    path = unquote(raw_path)
    segments = path.split("/")[1:]
    if (
        not path.startswith("/")
        or "#" in target
        or not _PATH_CHARS.match(path)
        or any(s in ("", ".", "..") for s in segments)
    ):
        raise refusal(method, raw_path[:200], "the path is not in canonical form", "send a plain absolute path", 400)
    version = _VERSION.match(path)
    prefix = version.group(0) if version else ""
    query = urlencode(parse_qsl(raw_query, keep_blank_values=True))
    return prefix, path[len(prefix) :], query


def route_request(method: str, target: str) -> Route:
    """The route of an allowed request; raises Refused for everything else."""
    version, path, query = _split_target(method, target)
    base = Route(method, path, version, query)
    if (path == "/_ping" and method in ("GET", "HEAD")) or (path == "/version" and method == "GET"):
        return base
    if path == "/containers/create" and method == "POST":
        return replace(base, body="container_create")
    if path == "/containers/json" and method == "GET":
        check_list_query(method, path, query)
        return base
    if _IMAGE_PATH.match(path) and method == "GET":
        return base
    if match := _CONTAINER_PATH.match(path):
        verb = match.group("verb")
        if (verb is None and method == "DELETE") or (method, verb) in _CONTAINER_VERBS:
            return replace(
                base,
                scope=Scope.CONTAINER,
                ref=match.group("ref"),
                body="exec_create" if verb == "exec" else None,
                foreign_state_only=verb == "json",
            )
    if (match := _EXEC_PATH.match(path)) and (method, match.group("verb")) in (("POST", "start"), ("GET", "json")):
        return replace(base, scope=Scope.EXEC, ref=match.group("ref"), upgrade=match.group("verb") == "start")
    raise refusal(method, path, "regrow's sandboxes never use this endpoint", _ASK_DIRECT)


def check_list_query(method: str, path: str, query: str) -> None:
    """Container listings must be restricted to regrow's containers by the engine's own label filter."""
    filters = [value for key, value in parse_qsl(query, keep_blank_values=True) if key == "filters"]
    remedy = f'pass filters={{"label": ["{MANAGED_FILTER}"]}} to list only regrow\'s containers'
    if len(filters) != 1:
        raise refusal(method, path, "a listing needs exactly one filters parameter", remedy)
    try:
        labels = strict_json(filters[0]).get("label")
    except ValueError as error:
        raise refusal(method, path, f"filters are not a JSON object ({error})", remedy, 400) from None
    if not isinstance(labels, (list, dict)) or MANAGED_FILTER not in labels:
        raise refusal(method, path, f"the listing is not restricted to label {MANAGED_FILTER}", remedy)


def _object_pairs(pairs: list[tuple[str, object]]) -> dict:
    # The engine's JSON decoder matches struct fields case-insensitively: no key may hide behind another's case.
    seen: set[str] = set()
    for key, _ in pairs:
        if not key.isascii() or key.lower() in seen:
            raise ValueError(f"duplicate or non-ASCII key {key!r}")
        seen.add(key.lower())
    return dict(pairs)


def strict_json(text: str | bytes) -> dict:
    """A JSON object whose keys are ASCII and unique regardless of case."""
    value = json.loads(text, object_pairs_hook=_object_pairs)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def field(obj: object, name: str) -> object:
    """obj[name] matched without regard to case, as the engine matches it; None when absent."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key.lower() == name.lower():
                return value
    return None


_LOCAL_LOG_DRIVERS = ("", "json-file", "local", "none")
_NO_NEW_PRIVILEGES = {"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"}
_ALLOWED_MODES = {
    "NetworkMode": {"", "none", "bridge", "default"},
    "IpcMode": {"", "none", "private", "shareable"},
    "CgroupnsMode": {"", "private"},
    "PidMode": {""},
    "UTSMode": {""},
    "UsernsMode": {""},
    "Cgroup": {""},
    "CgroupParent": {""},
    "Runtime": {""},
}
# Each must be absent, null, false or empty: each one opens a path to the host or to another container.
_MUST_BE_EMPTY = {
    "Privileged": "sandboxes never run privileged",
    "Binds": "bind mounts expose host paths",
    "VolumesFrom": "volumes of other containers may hold host paths",
    "Devices": "host devices are not for sandboxes",
    "DeviceRequests": "host devices are not for sandboxes",
    "DeviceCgroupRules": "host devices are not for sandboxes",
    "CapAdd": "added capabilities widen the kernel surface",
    "Capabilities": "a replaced capability set widens it",
    "PortBindings": "sandboxes publish no ports",
    "PublishAllPorts": "sandboxes publish no ports",
    "Links": "a link copies another container's environment in",
}
# An empty list is not the default here: it unmasks /proc paths or makes them writable. Only null keeps the default.
_MUST_BE_NULL = {"MaskedPaths": "it would expose the host kernel", "ReadonlyPaths": "it would expose the host kernel"}


def _host_config_problem(host: dict) -> str | None:
    for name, why in _MUST_BE_EMPTY.items():
        if field(host, name) not in (None, False, [], {}):
            return f"HostConfig.{name} must be empty ({why})"
    for name, why in _MUST_BE_NULL.items():
        if field(host, name) is not None:
            return f"HostConfig.{name} must be left out ({why})"
    for name, allowed in _ALLOWED_MODES.items():
        value = field(host, name)
        if value is not None and (not isinstance(value, str) or value not in allowed):
            return f"HostConfig.{name}={value!r} is not allowed (only {sorted(allowed)})"
    log_driver = field(field(host, "LogConfig"), "Type")
    if log_driver is not None and log_driver not in _LOCAL_LOG_DRIVERS:
        return (
            f"HostConfig.LogConfig.Type={log_driver!r} is not allowed (the engine would ship output off the host's "
            "network)"
        )
    mounts = field(host, "Mounts") or []
    if not isinstance(mounts, list) or any(field(mount, "Type") != "tmpfs" for mount in mounts):
        return "HostConfig.Mounts may only hold tmpfs mounts (other mounts expose host paths or volumes)"
    options = field(host, "SecurityOpt") or []
    if not isinstance(options, list) or any(
        not isinstance(option, str) or option not in _NO_NEW_PRIVILEGES for option in options
    ):
        return f"HostConfig.SecurityOpt may only hold no-new-privileges, got {options!r} (no unconfined profiles)"
    return None


def check_container_create(method: str, path: str, body: bytes) -> bytes:
    """The create body as it will be forwarded (re-serialized exactly as checked); raises Refused."""
    try:
        config = strict_json(body or b"{}")
    except ValueError as error:
        raise refusal(
            method, path, f"the body is not a plain JSON object ({error})", "send the engine's JSON", 400
        ) from None
    labels = field(config, "Labels")
    if not isinstance(labels, dict) or labels.get(MANAGED_LABEL) != "1":
        raise refusal(
            method,
            path,
            f"the container lacks the label {MANAGED_FILTER}",
            "create sandboxes with DockerBackend.create",
        )
    host = field(config, "HostConfig")
    # Engines before API 1.44 also read host settings from the top level of the body.
    for where in (host, config):
        why = _host_config_problem(where) if isinstance(where, dict) else "HostConfig must be a JSON object"
        if where is not None and why:
            raise refusal(method, path, why, "use the hardened defaults of DockerBackend.create")
    endpoints = field(field(config, "NetworkingConfig"), "EndpointsConfig") or {}
    if not isinstance(endpoints, dict) or not set(endpoints) <= _ALLOWED_MODES["NetworkMode"]:
        raise refusal(method, path, "NetworkingConfig may not attach other networks", "use network none or bridge")
    return json.dumps(config, separators=(",", ":")).encode()


def check_exec_create(method: str, path: str, body: bytes) -> bytes:
    """The exec-create body as it will be forwarded; a privileged exec is refused."""
    try:
        config = strict_json(body or b"{}")
    except ValueError as error:
        raise refusal(
            method, path, f"the body is not a plain JSON object ({error})", "send the engine's JSON", 400
        ) from None
    if field(config, "Privileged") not in (None, False):
        raise refusal(method, path, "privileged execs get every capability", "run the command unprivileged")
    return json.dumps(config, separators=(",", ":")).encode()
