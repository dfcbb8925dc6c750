"""pytest plugin for a synthesis sandbox: records calls of the deleted functions and methods while the F2P tests run.

Loaded there as `-p regrow_io_recorder`. REGROW_IO_CONFIG names a JSON file
`{"functions": {module: [name or Class.method or Class, ...]}, "library_files": [path, ...], "reads": [name, ...]}`;
the calls go to REGROW_IO_OUT as a JSON list when pytest ends, each with the node id of the test that made it (None
outside a test: at collection, say) and whether the library itself made it (internal: recursion, or one method
calling another). Arguments that are short literals are kept as text, and the call only if it left them as they
were; other arguments, and a method's receiver, are kept as one pickle of how they were before the call (base64),
with what the call left of them described after. Results and receivers are described as proto.call_values has it
(copied beside this file as regrow_call_values). A whole class is recorded as one program per test
(regrow_program_recorder). Stdlib only: it runs in the repository's interpreter.

A call's inputs are pickled by regrow_call_inputs; calls are replayed outside any test by regrow_call_runner.
"""

import collections
import functools
import importlib
import importlib.machinery
import inspect
import json
import os
import sys

try:  # in a sandbox the values module is copied beside this one; in regrow it is proto's
    from regrow_argument_recipes import recipe_texts, unchanged_literals
    from regrow_call_inputs import inputs_text
    from regrow_call_values import described_text, drawn_text, literal_text, state_text
    from regrow_program_recorder import ProgramRecorder
    from regrow_receiver_pool import ReceiverPool
except ImportError:
    from proto.call_values import described_text, drawn_text, literal_text, state_text
    from task_synth.validation.inside.argument_recipes import recipe_texts, unchanged_literals
    from task_synth.validation.inside.call_inputs import inputs_text
    from task_synth.validation.inside.program_recorder import ProgramRecorder
    from task_synth.validation.inside.receiver_pool import ReceiverPool

MAX_RECORDS = 500
# A test that grows a big receiver call by call would pickle and describe it whole at every call: after this many
# calls of a function that were examined and could not be recorded, a test's further calls of it are not examined.
MAX_UNRECORDED = 3
_unrecorded: collections.Counter = collections.Counter()  # (module, name) -> calls in this test examined in vain
_functions: dict = {}
_library_files: set = set()
_reads: list = []  # attributes the visible tests read, which show a deleted class's instances
_programs: dict = {}  # (module, class name) -> its ProgramRecorder
_pools: dict = {}  # (module, class name) -> the ReceiverPool of a class whose methods were deleted
_records: list = []
_seen: set = set()
_current_test = [None]
_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader)


class _Given:
    """What a recorded call was given, as its record spells it: the function, its arguments' texts (args, kwargs,
    whether they are recipes), the pickle of its receiver and other arguments, and whether the library made it."""

    def __init__(self, module, name, texts, inputs, internal):
        self.module, self.name, self.texts, self.inputs, self.internal = module, name, texts, inputs, internal


def _record(given, outcome, state, after, take=None):
    """Keep a finished call's record, once and while there is room: `outcome` is (result text, raised class name)."""
    (args_text, kwargs_text, recipes), (result_text, raises) = given.texts, outcome
    test = _current_test[0]
    record = (
        given.module, given.name, args_text, kwargs_text, result_text, raises, test, given.inputs, state, after, take,
        given.internal,
    )  # fmt: skip
    if record in _seen or len(_records) >= MAX_RECORDS:
        return
    _seen.add(record)
    fields = ("module", "qualname", "args", "kwargs", "result", "raises", "test", "inputs", "state", "args_after")
    _records.append({**dict(zip(fields, record)), "take": take, "internal": given.internal, "recipes": recipes})


def _argument_texts(args, kwargs):
    """(args text, kwargs text, whether they are recipes): literal texts where the arguments are literals, else
    recipes; None where neither spells them."""
    texts = literal_text(args), literal_text(kwargs)
    if None not in texts:
        return (*texts, False)
    recipes = recipe_texts(args, kwargs, _library_files)
    return None if recipes is None else (*recipes, True)


def _unchanged(args, kwargs, args_text, kwargs_text, recipes=False):
    if recipes:
        return unchanged_literals(args, kwargs, args_text, kwargs_text)
    return literal_text(args) == args_text and literal_text(kwargs) == kwargs_text


def _recording_generator(function, module, name):
    """A generator function's calls with literal arguments (or recipes of them): the items the test drew, each
    described as it came, and whether it drew to the end (then the replay draws one more, to see the end too). A
    generator method's receiver is pickled as it was before the call and described as the draws left it."""
    method = "." in name

    @functools.wraps(function)
    def recorded(*args, **kwargs):
        receiver, plain = (args[0], args[1:]) if method and args else (None, args)
        texts = _argument_texts(plain, kwargs) if len(_records) < MAX_RECORDS else None
        inputs = inputs_text(receiver, None, _library_files) if method and texts is not None else None
        if texts is None or (method and inputs is None):
            return (yield from function(*args, **kwargs))
        given = _Given(module, name, texts, inputs, sys._getframe(1).f_code.co_filename in _library_files)

        def finish(outcome, take):
            state = state_text(receiver) if method else None
            if _unchanged(plain, kwargs, *texts) and (state is not None or not method):
                _record(given, (outcome, None), state, None, take)

        return (yield from _drawing(function(*args, **kwargs), finish))

    recorded.__regrow_recorded__ = True
    return recorded


def _drawing(iterator, finish):
    """Hand on `iterator`'s items to the test (and what it sends, to a generator), keeping each described as it came
    and how it ended; `finish(outcome text, take)` once the test stops drawing, unless an item had no description."""
    items, end, sent = [], None, None
    try:
        while True:
            try:
                item = iterator.send(sent) if sent is not None else next(iterator)
            except StopIteration as stop:
                end = "ended"
                return stop.value
            except Exception as error:
                end = ("raised", type(error).__name__)
                raise
            items.append(described_text(item))
            sent = yield item
    finally:  # also when the test stopped drawing: the items it drew are the outcome
        if None not in items:
            finish(drawn_text(items, end), len(items) + (end is not None))


class _Pending:
    """One call of a deleted function being recorded: what it was given, kept before it runs."""

    def __init__(self, given, receiver, plain, kwargs, literal, pickled):
        self.given, self.receiver, self.plain, self.kwargs = given, receiver, plain, kwargs
        self.literal, self.pickled = literal, pickled

    def finish(self, outcome, take=None):
        kept = self._recorded(outcome, take)
        _unrecorded[self.given.module, self.given.name] += int(self.pickled and not kept)

    def _recorded(self, outcome, take):
        """Record the finished call, and say whether it could be: literal arguments must be left as they were;
        pickled ones are described after."""
        args, kwargs, receiver = self.plain, self.kwargs, self.receiver
        if self.literal and not _unchanged(args, kwargs, *self.given.texts):
            return False
        after = None if self.literal else described_text((args, kwargs))
        state = state_text(receiver) if receiver is not None else None
        if (not self.literal and after is None) or (receiver is not None and state is None):
            return False
        _record(self.given, outcome, state, after, take)
        return True

    def returned(self, result):
        """Record what the call returned; the value to hand the caller (a lazy iterator is recorded as drawn)."""
        result_text = described_text(result)
        if result_text is None and _lazy(result):  # a map, a zip, an itertools object: recorded as it is drawn

            def finish(drawn, take):
                if take:  # a test that drew nothing shows nothing of it
                    self.finish((drawn, None), take)

            return _drawing(result, finish)
        if result_text is None:
            _unrecorded[self.given.module, self.given.name] += int(self.pickled)
        else:
            self.finish((result_text, None))
        return result


def _pending(module, name, args, kwargs, caller):
    """The call about to run, to record; None when it cannot be (no literal or pickle spells what it was given, or
    the recorder is full)."""
    if len(_records) >= MAX_RECORDS:
        return None
    method = "." in name
    internal = caller.f_code.co_filename in _library_files
    receiver, plain = (args[0], args[1:]) if method and args else (None, args)
    texts = _argument_texts(plain, kwargs)
    literal = texts is not None
    # A method's receiver, and arguments that neither literals nor recipes spell, go into the check as one pickle.
    pickled = method or not literal
    if pickled and _unrecorded[module, name] >= MAX_UNRECORDED:
        return None
    inputs = inputs_text(receiver, None if literal else (plain, kwargs), _library_files) if pickled else None
    if pickled and inputs is None:
        _unrecorded[module, name] += 1
        return None
    given = _Given(module, name, texts if literal else ("()", "{}", False), inputs, internal)
    return _Pending(given, receiver, plain, kwargs, literal, pickled)


def _recording(function, module, name):
    @functools.wraps(function)
    def recorded(*args, **kwargs):
        pending = _pending(module, name, args, kwargs, sys._getframe(1))
        if pending is None:
            return function(*args, **kwargs)
        try:
            result = function(*args, **kwargs)
        except Exception as error:
            pending.finish((None, type(error).__name__))
            raise
        return pending.returned(result)

    recorded.__regrow_recorded__ = True
    return recorded


def _recording_coroutine(function, module, name):
    """An async function's calls: the outcome is what awaiting the call gave, as the replay awaits it."""

    @functools.wraps(function)
    async def recorded(*args, **kwargs):
        pending = _pending(module, name, args, kwargs, sys._getframe(1))
        if pending is None:
            return await function(*args, **kwargs)
        try:
            result = await function(*args, **kwargs)
        except Exception as error:
            pending.finish((None, type(error).__name__))
            raise
        return pending.returned(result)

    recorded.__regrow_recorded__ = True
    return recorded


def _lazy(result):
    """Whether a call returned a lazy iterator of the interpreter's own (map, zip, a list's iterator, itertools'):
    what it gives is only known as it is drawn."""
    try:
        return iter(result) is result and type(result).__module__ in ("builtins", "itertools")
    except Exception:  # an object whose __iter__ raises is no iterator
        return False


def _wrap(module):
    """Put recording wrappers in place of the module's target functions; returns {id(original): (original, wrapper)}."""
    swapped = {}
    for name in _functions.get(module.__name__, ()):
        owner_name, _, attribute = name.rpartition(".")
        owner = module.__dict__.get(owner_name) if owner_name else None
        namespace = owner.__dict__ if inspect.isclass(owner) else module.__dict__ if not owner_name else {}
        function = namespace.get(attribute)
        if not owner_name and inspect.isclass(function) and function.__module__ == module.__name__:
            if (module.__name__, name) not in _programs:  # a deleted class: its tests' programs are recorded
                _programs[module.__name__, name] = ProgramRecorder(module.__name__, name, function, _reads, MAX_RECORDS)
                _programs[module.__name__, name].wrap()
            continue
        if not inspect.isfunction(function) or getattr(function, "__regrow_recorded__", False):
            continue
        if inspect.isasyncgenfunction(function):
            continue
        if inspect.iscoroutinefunction(function):
            wrapper = _recording_coroutine(function, module.__name__, name)
        elif inspect.isgeneratorfunction(function):
            wrapper = _recording_generator(function, module.__name__, name)
        else:
            wrapper = _recording(function, module.__name__, name)
        if owner_name:  # a method is looked up on its class at each call: no other reference to point at it
            setattr(owner, attribute, wrapper)
            _pool_of(module.__name__, owner_name, owner)
        else:
            module.__dict__[name] = wrapper
            swapped[id(function)] = (function, wrapper)
    return swapped


def _pool_of(module, owner_name, owner):
    """Start keeping the states of a class whose methods were deleted, once."""
    if (module, owner_name) in _pools or not inspect.isclass(owner):
        return
    deleted = {name.rpartition(".")[2] for name in _functions.get(module, ()) if name.rpartition(".")[0] == owner_name}
    in_test = lambda: _current_test[0] is not None  # noqa: E731
    pool = ReceiverPool(module, owner, lambda receiver: inputs_text(receiver, None, _library_files), in_test)
    pool.wrap(deleted)
    _pools[module, owner_name] = pool


def _replace_references(swapped):
    """Point every module-level reference to an original at its wrapper: names bound to it (`from mod import fn`
    done before us), and entries of module-level dicts and lists (a table of handlers)."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if _swapped_in(namespace, key, value, swapped):
                continue
            if type(value) is dict:
                for inner, item in list(value.items()):
                    _swapped_in(value, inner, item, swapped)
            elif type(value) is list:
                for index, item in enumerate(value):
                    _swapped_in(value, index, item, swapped)


def _swapped_in(container, key, item, swapped):
    """Put its wrapper at `container[key]` where `item` is a wrapped original; whether it was one."""
    pair = swapped.get(id(item))
    if pair is not None and pair[0] is item:
        container[key] = pair[1]
        return True
    return False


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
                _replace_references(_wrap(module))  # its own tables of handlers, too

            spec.loader.exec_module = exec_module
        return spec


def pytest_load_initial_conftests(early_config):
    """Before conftests and test modules import anything: wrap what is imported already and hook later imports."""
    with open(os.environ["REGROW_IO_CONFIG"]) as handle:
        config = json.load(handle)
    _functions.update(config["functions"])
    _library_files.update(config["library_files"])
    _reads.extend(config.get("reads", ()))
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
    _unrecorded.clear()
    for program in _programs.values():
        program.start(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    _current_test[0] = None
    for program in _programs.values():
        program.finish()


def pytest_unconfigure(config):
    programs = [record for program in _programs.values() for record in program.records]
    pools = [pool.record() for pool in _pools.values()]
    with open(os.environ["REGROW_IO_OUT"], "w") as handle:
        json.dump(_records + programs[: MAX_RECORDS - len(_records)] + pools, handle)
