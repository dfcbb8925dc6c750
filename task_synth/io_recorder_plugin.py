"""pytest plugin for a synthesis sandbox: records literal calls of the deleted functions while the F2P tests run.

Loaded there as `-p regrow_io_recorder`. REGROW_IO_CONFIG names a JSON file
`{"functions": {module: [name or Class.method, ...]}, "library_files": [path, ...]}`; the calls go to REGROW_IO_OUT as
a JSON list
when pytest ends, each with the node id of the test that made it (None outside a test: at collection, say). A call is
recorded only when test code made it (its caller is no library file, which leaves out recursion and the library's own
calls), its arguments, keyword arguments and result are short literals, and it left its arguments as they were. A
method's call also keeps its receiver as it was before the call (a pickle, base64) and its literal attributes after.
Stdlib only: it runs in the repository's interpreter.

Run as a script (`python -m regrow_io_recorder CALLS_JSON LIMIT BUDGET`) it runs calls outside any test, in one process
and each under a time limit, and prints their outcomes: the perturbed calls that become unseen checks, and the replay
that
every check must pass.
"""

import ast
import base64
import functools
import importlib
import importlib.machinery
import inspect
import io
import json
import math
import os
import pickle
import signal
import sys
import time

MAX_TEXT = 300
MAX_RECORDS = 500
MAX_RECEIVER = 16 * 1024  # bytes of a method's pickled receiver
_functions: dict = {}
_library_files: set = set()
_records: list = []
_seen: set = set()
_current_test = [None]
_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader)


def is_plain(value):
    """Whether `value` holds only exact literal types, in few enough nodes that its repr can stay short."""
    stack, nodes = [value], 0
    while stack:
        item = stack.pop()
        nodes += 1
        kind = type(item)
        if nodes > MAX_TEXT:
            return False
        if kind is int:
            if item.bit_length() > 1000:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind in (str, bytes, tuple, list, set, frozenset, dict):
            if len(item) > MAX_TEXT:
                return False
            if kind is dict:
                stack.extend(item.keys())
                stack.extend(item.values())
            elif kind not in (str, bytes):
                stack.extend(item)
        elif item is not None and kind is not bool:
            return False
    return True


def literal_text(value):
    """`repr(value)` when it is short and `ast.literal_eval` reads it back equal; else None."""
    if not is_plain(value):
        return None
    text = repr(value)
    try:
        return text if len(text) <= MAX_TEXT and ast.literal_eval(text) == value else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # frozenset(...) is no literal
        return None


def _record(module, name, args_text, kwargs_text, result_text, raises, receiver=None, state=None):
    record = (module, name, args_text, kwargs_text, result_text, raises, _current_test[0], receiver, state)
    if record in _seen or len(_records) >= MAX_RECORDS:
        return
    _seen.add(record)
    fields = ("module", "qualname", "args", "kwargs", "result", "raises", "test", "receiver", "state")
    _records.append(dict(zip(fields, record)))


def receiver_text(receiver):
    """The receiver as a base64 pickle a fresh interpreter can load, or None when it does not pickle small."""
    try:
        data = pickle.dumps(receiver, protocol=4)
        if len(data) > MAX_RECEIVER or type(pickle.loads(data)) is not type(receiver):
            return None
    except Exception:  # locks, lambdas, open files: no check of this call
        return None
    return base64.b64encode(data).decode()


def state_text(receiver):
    """The receiver's instance attributes that hold literals, as dict literal text; None without a `__dict__`."""
    attributes = getattr(receiver, "__dict__", None)
    if type(attributes) is not dict:
        return None
    return literal_text({k: v for k, v in attributes.items() if type(k) is str and literal_text(v) is not None})


def _recording(function, module, name):
    method = "." in name

    @functools.wraps(function)
    def recorded(*args, **kwargs):
        if sys._getframe(1).f_code.co_filename in _library_files:
            return function(*args, **kwargs)
        receiver, plain = (args[0], args[1:]) if method and args else (None, args)
        args_text, kwargs_text = literal_text(plain), literal_text(kwargs)
        pickled = receiver_text(receiver) if method and None not in (args_text, kwargs_text) else None
        if method and pickled is None:
            return function(*args, **kwargs)
        try:
            result = function(*args, **kwargs)
        except Exception as error:
            if args_text is not None and kwargs_text is not None and _unchanged(plain, kwargs, args_text, kwargs_text):
                state = state_text(receiver) if method else None
                _record(module, name, args_text, kwargs_text, None, type(error).__name__, pickled, state)
            raise
        result_text = literal_text(result)
        if None not in (args_text, kwargs_text, result_text) and _unchanged(plain, kwargs, args_text, kwargs_text):
            state = state_text(receiver) if method else None
            if not method or state is not None:
                _record(module, name, args_text, kwargs_text, result_text, None, pickled, state)
        return result

    recorded.__regrow_recorded__ = True
    return recorded


def _unchanged(args, kwargs, args_text, kwargs_text):
    return literal_text(args) == args_text and literal_text(kwargs) == kwargs_text


def _wrap(module):
    """Put recording wrappers in place of the module's target functions; returns {id(original): (original, wrapper)}."""
    swapped = {}
    for name in _functions.get(module.__name__, ()):
        owner_name, _, attribute = name.rpartition(".")
        owner = module.__dict__.get(owner_name) if owner_name else None
        namespace = owner.__dict__ if inspect.isclass(owner) else module.__dict__ if not owner_name else {}
        function = namespace.get(attribute)
        if not inspect.isfunction(function) or getattr(function, "__regrow_recorded__", False):
            continue
        if (
            inspect.isgeneratorfunction(function)
            or inspect.iscoroutinefunction(function)
            or inspect.isasyncgenfunction(function)
        ):
            continue
        wrapper = _recording(function, module.__name__, name)
        if owner_name:  # a method is looked up on its class at each call: no other reference to point at it
            setattr(owner, attribute, wrapper)
        else:
            module.__dict__[name] = wrapper
            swapped[id(function)] = (function, wrapper)
    return swapped


def _replace_references(swapped):
    """Point every module-level name bound to an original (`from mod import fn` done before us) at its wrapper."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            pair = swapped.get(id(value))
            if pair is not None and pair[0] is value:
                namespace[key] = pair[1]


class _WrapAfterImport:
    """A meta path finder that lets the other finders find a target module, then wraps its functions once it ran."""

    def find_spec(self, name, path=None, target=None):
        if name not in _functions:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        if isinstance(spec.loader, _FILE_LOADERS):  # one loader per module, so patching it is local
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                _wrap(module)

            spec.loader.exec_module = exec_module
        return spec


def pytest_load_initial_conftests(early_config):
    """Before conftests and test modules import anything: wrap what is imported already and hook later imports."""
    with open(os.environ["REGROW_IO_CONFIG"]) as handle:
        config = json.load(handle)
    _functions.update(config["functions"])
    _library_files.update(config["library_files"])
    sys.meta_path.insert(0, _WrapAfterImport())
    _wrap_imported()


def pytest_collection_finish(session):
    """A safety net for a target module that a loader other than a file loader imported (e.g. assertion rewriting)."""
    _wrap_imported()


def _wrap_imported():
    swapped = {}
    for name in _functions:
        if name in sys.modules:
            swapped.update(_wrap(sys.modules[name]))
    if swapped:
        _replace_references(swapped)


def pytest_runtest_logstart(nodeid, location):
    """From here to the test's logfinish, a recorded call is the test's (`item.nodeid`, as FAIL_TO_PASS spells it)."""
    _current_test[0] = nodeid


def pytest_runtest_logfinish(nodeid, location):
    _current_test[0] = None


def pytest_unconfigure(config):
    with open(os.environ["REGROW_IO_OUT"], "w") as handle:
        json.dump(_records, handle)


class Overtime(BaseException):
    """Raised into a call that ran past its time limit."""


def _overtime(signum, frame):
    raise Overtime


def call_outcome(module, qualname, args_text, kwargs_text, limit, receiver=None):
    """(result, raises, state) of one call run under a time limit; None unless it returned a literal or raised an
    Exception and left its arguments as they were. A method's call runs on its receiver unpickled anew."""
    if receiver:
        target = pickle.loads(base64.b64decode(receiver))
        function = getattr(target, qualname.rpartition(".")[2])
    else:
        target, function = None, importlib.import_module(module)
        for part in qualname.split("."):
            function = getattr(function, part)
    args, kwargs = ast.literal_eval(args_text), ast.literal_eval(kwargs_text)
    before, result, raises = (literal_text(args), literal_text(kwargs)), None, None
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        result = literal_text(function(*args, **kwargs))
    except Exception as error:
        raises = type(error).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    state = state_text(target) if receiver else None
    unchanged = (literal_text(args), literal_text(kwargs)) == before
    if not unchanged or (result, raises) == (None, None) or (receiver and state is None):
        return None
    return result, raises, state


def print_call_outcomes(calls, limit, budget):
    """Run `calls` ([module, qualname, args, kwargs, receiver] lists) in turn, each under `limit` seconds, while
    `budget` seconds last; print a JSON line [index, result, raises, state] per call with an outcome, as soon as it
    has one."""
    signal.signal(signal.SIGALRM, _overtime)
    stdout, deadline = sys.stdout, time.monotonic() + budget
    for index, call in enumerate(calls):
        if time.monotonic() > deadline:
            break
        sys.stdout = io.StringIO()  # what the functions print is not the outcome
        try:
            found = call_outcome(*call[:4], limit, *call[4:5])
        except BaseException:  # past its time, exiting, or no such function
            found = None
        finally:
            sys.stdout = stdout
        if found is not None:
            print(json.dumps([index, *found]), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        print_call_outcomes(json.load(handle), float(sys.argv[2]), float(sys.argv[3]))
