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

Run as a script (`python -m regrow_io_recorder CALLS_JSON LIMIT BUDGET`) it runs calls outside any test, in one process
and each under a time limit, and prints their outcomes (none for a call that drew from `random`, whose outcome is
chance): the perturbed calls that become unseen checks and the replay that every check must pass. With
`--mutants SPEC_JSON` first, it runs the same calls against each mutant of the unit, a forked child each.
"""

import base64
import collections
import contextlib
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import io
import json
import os
import pickle
import random
import sys
import time
import types

try:  # in a sandbox the values module is copied beside this one; in regrow it is proto's
    from regrow_argument_recipes import function_recipe, recipe_texts, unchanged_literals
    from regrow_call_values import built, described_text, drawn_text, literal_text, replay, replay_program, state_text
    from regrow_line_reach import LineReach
    from regrow_program_recorder import ProgramRecorder
    from regrow_receiver_pool import ReceiverPool
except ImportError:
    from proto.call_values import built, described_text, drawn_text, literal_text, replay, replay_program, state_text
    from task_synth.validation.inside.argument_recipes import function_recipe, recipe_texts, unchanged_literals
    from task_synth.validation.inside.line_reach import LineReach
    from task_synth.validation.inside.program_recorder import ProgramRecorder
    from task_synth.validation.inside.receiver_pool import ReceiverPool

MAX_RECORDS = 500
MAX_INPUTS = 32 * 1024  # bytes of a call's pickled receiver and arguments
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


def _record(
    module, name, args_text, kwargs_text, result_text, raises, inputs, state, after, internal, take=None, recipes=False
):
    test = _current_test[0]
    record = (module, name, args_text, kwargs_text, result_text, raises, test, inputs, state, after, take, internal)
    if record in _seen or len(_records) >= MAX_RECORDS:
        return
    _seen.add(record)
    fields = ("module", "qualname", "args", "kwargs", "result", "raises", "test", "inputs", "state", "args_after")
    _records.append({**dict(zip(fields, record)), "take": take, "internal": internal, "recipes": recipes})


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
        inputs = inputs_text(receiver, None) if method and texts is not None else None
        if texts is None or (method and inputs is None):
            return (yield from function(*args, **kwargs))
        internal = sys._getframe(1).f_code.co_filename in _library_files

        def finish(outcome, take):
            state = state_text(receiver) if method else None
            if _unchanged(plain, kwargs, *texts) and (state is not None or not method):
                _record(module, name, *texts[:2], outcome, None, inputs, state, None, internal, take, texts[2])

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


def inputs_text(receiver, arguments):
    """(receiver, arguments) as a base64 pickle a fresh interpreter can load, or None when they do not pickle small.
    `arguments` is (args, kwargs) where they are no literals, else None (the check's literal text holds them)."""
    try:
        data = _pickled((receiver, arguments))
        if len(data) > MAX_INPUTS or type(pickle.loads(data)[0]) is not type(receiver):
            return None
    except Exception:  # locks, lambdas, open files: no check of this call
        return None
    return base64.b64encode(data).decode()


def _pickled(value):
    """pickle's own bytes where they do, else with functions as recipes: the recipe pickler calls back into Python for
    every object, which a receiver pickled at every call cannot afford."""
    try:
        return pickle.dumps(value, protocol=4)
    except (pickle.PicklingError, AttributeError, TypeError):
        buffer = io.BytesIO()
        _FunctionsAsRecipes(buffer, protocol=4).dump(value)
        return buffer.getvalue()


class _FunctionsAsRecipes(pickle.Pickler):
    """A pickler that carries a function no module holds by its name (a test's lambda, the library's own `lambda x:
    True` default) as its recipe, which `built` makes anew where the pickle is loaded: an object that holds one
    (more-itertools' bucket holds its key) then pickles, where pickle alone refuses it."""

    def reducer_override(self, obj):
        if type(obj) is types.FunctionType:
            recipe = function_recipe(obj, _library_files)
            if recipe is not None:
                return built, (recipe,)
        return NotImplemented


class _Pending:
    """One call of a deleted function being recorded: what it was given, kept before it runs."""

    def __init__(self, module, name, receiver, plain, kwargs, texts, literal, pickled, inputs, internal):
        self.module, self.name, self.receiver, self.plain, self.kwargs = module, name, receiver, plain, kwargs
        self.texts, self.literal, self.pickled, self.inputs, self.internal = texts, literal, pickled, inputs, internal

    def finish(self, outcome, take=None):
        kept = _outcome(
            self.module, self.name, self.texts, outcome, self.inputs, self.receiver, (self.plain, self.kwargs),
            self.literal, self.internal, take,
        )  # fmt: skip
        _unrecorded[self.module, self.name] += int(self.pickled and not kept)

    def returned(self, result):
        """Record what the call returned; the value to hand the caller (a lazy iterator is recorded as drawn)."""
        result_text = described_text(result)
        if result_text is None and _lazy(result):  # a map, a zip, an itertools object: recorded as it is drawn

            def finish(drawn, take):
                if take:  # a test that drew nothing shows nothing of it
                    self.finish((drawn, None), take)

            return _drawing(result, finish)
        if result_text is None:
            _unrecorded[self.module, self.name] += int(self.pickled)
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
    inputs = inputs_text(receiver, None if literal else (plain, kwargs)) if pickled else None
    if pickled and inputs is None:
        _unrecorded[module, name] += 1
        return None
    texts = texts if literal else ("()", "{}", False)
    return _Pending(module, name, receiver, plain, kwargs, texts, literal, pickled, inputs, internal)


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


def _outcome(module, name, texts, outcome, inputs, receiver, arguments, literal, internal, take=None) -> bool:
    """Record one finished call, and say whether it could be: literal arguments must be left as they were; pickled
    ones are described after."""
    (args, kwargs), (result_text, raises) = arguments, outcome
    if literal and not _unchanged(args, kwargs, *texts):
        return False
    after = None if literal else described_text((args, kwargs))
    state = state_text(receiver) if receiver is not None else None
    if (not literal and after is None) or (receiver is not None and state is None):
        return False
    args_text, kwargs_text, recipes = texts
    _record(module, name, args_text, kwargs_text, result_text, raises, inputs, state, after, internal, take, recipes)
    return True


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
    pool = ReceiverPool(module, owner, lambda receiver: inputs_text(receiver, None), in_test)
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
            pair = swapped.get(id(value))
            if pair is not None and pair[0] is value:
                namespace[key] = pair[1]
            elif type(value) is dict:
                for inner, item in list(value.items()):
                    pair = swapped.get(id(item))
                    if pair is not None and pair[0] is item:
                        value[inner] = pair[1]
            elif type(value) is list:
                for index, item in enumerate(value):
                    pair = swapped.get(id(item))
                    if pair is not None and pair[0] is item:
                        value[index] = pair[1]


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


def call_outcome(
    module, qualname, args_text, kwargs_text, limit, inputs=None, steps=None, reads=(), take=None, recipes=False,
    beside=None,
):  # fmt: skip
    """(result, raises, state, arguments after) of one call, or one program of a class, replayed; None unless it
    returned a describable value or raised an Exception, left literal arguments as they were, and its receiver and
    pickled arguments are describable after."""
    if steps is not None:
        found = replay_program(module, qualname, steps, reads, limit)
        returned, state = found.get("returned"), found.get("state")
        return None if returned is None or state is None else (returned, None, state, None)
    found = replay(module, qualname, args_text, kwargs_text, inputs, limit, take, recipes, beside)
    if (found.get("returned"), found.get("raised")) == (None, None) or found.get("changed_args"):
        return None
    if ("state" in found and found["state"] is None) or ("args_after" in found and found["args_after"] is None):
        return None
    return found.get("returned"), found.get("raised"), found.get("state"), found.get("args_after")


def import_modules(calls):
    """Import the calls' modules before any call's time starts, as the grader's check child does: a package that takes
    longer to import than a call's `limit` (inflect's 1.7 s) had every call time out, so its mutants all survived."""
    for module in sorted({call[0] for call in calls}):
        try:
            importlib.import_module(module)
        except BaseException:  # the calls then fail to import it themselves, each under its limit, and say so
            pass


def print_call_outcomes(calls, limit, budget, tag=()):
    """Run `calls` ([module, qualname, args, kwargs, inputs, steps, reads, take, recipes, beside] lists) in turn,
    each under `limit` seconds once their modules are imported, while `budget` seconds last; print a JSON line [*tag,
    index, result, raises, state, args after] per call with an outcome, as soon as it has one. With
    REGROW_REACH_FILES (a JSON list of paths) set, each call's lines in those files go to REGROW_REACH_OUT as a JSON
    line [index, {path: [line, ...]}]."""
    stdout = sys.stdout
    sys.stdout = io.StringIO()  # what importing prints is not an outcome either
    try:
        import_modules(calls)
    finally:
        sys.stdout = stdout
    reach_files = json.loads(os.environ.get("REGROW_REACH_FILES") or "null")
    reach_out = open(os.environ["REGROW_REACH_OUT"], "w") if reach_files else None
    deadline = time.monotonic() + budget
    for index, call in enumerate(calls):
        if time.monotonic() > deadline:
            break
        sys.stdout = io.StringIO()  # what the functions print is not the outcome
        drawn_from = random.getstate()
        reach = LineReach(reach_files) if reach_out else contextlib.nullcontext()
        try:
            with reach:
                found = call_outcome(*call[:4], limit, *call[4:10])
        except BaseException:  # past its time, exiting, or no such function
            found = None
        finally:
            sys.stdout = stdout
        if random.getstate() != drawn_from:  # it drew random numbers: its outcome is chance, and another's draws differ
            found = None
        if found is not None:
            print(json.dumps([*tag, index, *found]), flush=True)
            if reach_out:
                reach_out.write(json.dumps([index, reach.as_json()]) + "\n")
                reach_out.flush()


class _MutantFinder:
    """Serves one module from the given source text instead of its file: a mutant, without writing the workspace
    (which the sandbox's user may not write) and without stale bytecode."""

    def __init__(self, name, path, source):
        self.name, self.path, self.source = name, path, source

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        package = os.path.basename(self.path) == "__init__.py"
        locations = [os.path.dirname(self.path)] if package else None
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=self, submodule_search_locations=locations
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, self.path, "exec"), module.__dict__)


# A mutant's child imports the package afresh before its calls' budget starts: this much longer before it is killed.
IMPORT_ALLOWANCE_S = 30.0


def print_mutant_outcomes(mutants, calls, limit, budget):
    """The calls against each mutant in turn (`{"module", "path", "source"}`: the module's text in place of its file;
    a group's mutants span modules), each in a child forked from this process, which has not imported the package:
    every child imports it afresh with the mutant in place of the module, and nothing a child does outlives it. Lines
    are tagged with the mutant's number."""
    for number, mutant in enumerate(mutants):
        sys.stdout.flush()
        child = os.fork()
        if child == 0:
            try:
                sys.meta_path.insert(0, _MutantFinder(mutant["module"], mutant["path"], mutant["source"]))
                print_call_outcomes(calls, limit, budget, (number,))
            finally:
                sys.stdout.flush()
                os._exit(0)
        _reap(child, time.monotonic() + budget + IMPORT_ALLOWANCE_S + 5)


def _reap(child, deadline):
    """Wait for the child until `deadline`, then kill it: a mutant's call may block where no alarm reaches."""
    while os.waitpid(child, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(child, 9)
            os.waitpid(child, 0)
            return
        time.sleep(0.005)


if __name__ == "__main__":
    if sys.argv[1] == "--mutants":
        with open(sys.argv[2]) as handle:
            spec = json.load(handle)
        with open(sys.argv[3]) as handle:
            calls = json.load(handle)
        print_mutant_outcomes(spec["mutants"], calls, *map(float, sys.argv[4:6]))
    else:
        with open(sys.argv[1]) as handle:
            print_call_outcomes(json.load(handle), float(sys.argv[2]), float(sys.argv[3]))
