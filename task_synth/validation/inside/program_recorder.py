"""Programs of a deleted class, recorded while the F2P tests run: what each test did with the class's instances.

A deleted class has no one call to check. So each test's use of it is kept as a straight-line program: the
instances it made (`new`), the methods, class methods and properties it used on them (`call`, `get`), each step's
outcome, and at the end its instances as the attributes the visible tests read show them. Only the calls made from
outside the class count (`depth` 0): what a method does inside is the implementation's own business. An argument
that is an instance made earlier in the program is kept as a reference to its step, so `a + b` replays.

A step the program cannot spell (an argument that is no literal, an instance it did not see made) ends the
program there: its state is read at once, so the replay of what was kept sees what the test saw.

Shipped beside the recorder plugin as `regrow_program_recorder`. Stdlib only: it runs in the repository's
interpreter.
"""

import ast
import functools
import inspect

try:  # in a sandbox the values and replay modules are copied beside this one; in regrow they are proto's
    from regrow_call_replay import outcomes_text, program_text, raised_text, returned_text
    from regrow_call_values import MAX_PROGRAM_TEXT, MAX_STEPS, literal_text
except ImportError:
    from proto.call_replay import outcomes_text, program_text, raised_text, returned_text
    from proto.call_values import MAX_PROGRAM_TEXT, MAX_STEPS, literal_text

# Hooks the interpreter, pickle or copy call on their own, or that run at definition or teardown: no test's step.
NOT_STEPS = frozenset(
    {
        "__new__", "__init_subclass__", "__class_getitem__", "__del__", "__getattribute__", "__getattr__",
        "__setattr__", "__delattr__", "__hash__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__",
        "__copy__", "__deepcopy__", "__sizeof__", "__dir__", "__format__", "__set_name__",
    }
)  # fmt: skip


class ProgramRecorder:
    """Records one deleted class's programs, one per test; `records` holds them as the recorder plugin's entries."""

    def __init__(self, module, qualname, klass, reads, limit):
        self.module, self.qualname, self.klass = module, qualname, klass
        self.view = (klass, tuple(reads))
        self.reads, self.limit = list(reads), limit
        self.depth = 0
        self.records = []
        self._reset(None)

    def _reset(self, test):
        self.test = test
        self.steps, self.outcomes, self.objects = [], [], []
        self.index = {}  # id of an instance the program made -> the step that gave it
        self.closed, self.state = False, None  # the state is read when the program ends early

    def wrap(self):
        """Put recording wrappers in place of the class's own methods, class methods, static methods and properties."""
        for name, attribute in list(vars(self.klass).items()):
            if name in NOT_STEPS:
                continue
            if inspect.isfunction(attribute):
                setattr(self.klass, name, self._wrapped(name, attribute, "method"))
            elif isinstance(attribute, (classmethod, staticmethod)) and inspect.isfunction(attribute.__func__):
                kind = "classmethod" if isinstance(attribute, classmethod) else "staticmethod"
                setattr(self.klass, name, type(attribute)(self._wrapped(name, attribute.__func__, kind)))
            elif isinstance(attribute, property) and inspect.isfunction(attribute.fget):
                getter = self._wrapped(name, attribute.fget, "property")
                setattr(self.klass, name, property(getter, attribute.fset, attribute.fdel, attribute.__doc__))

    def start(self, test):
        self.finish()
        self._reset(test)

    def finish(self):
        """Keep the program the current test ran, if it ran one within the limits."""
        if self.test is not None and self.steps and len(self.records) < self.limit:
            state = self.state if self.closed else self._state()
            result = outcomes_text(self.outcomes)
            if state is not None and len(result) <= MAX_PROGRAM_TEXT:
                self.records.append(self._record(repr(tuple(self.steps)), result, state))
        self._reset(None)

    def _record(self, steps, result, state):
        return {
            "module": self.module, "qualname": self.qualname, "args": "()", "kwargs": "{}", "steps": steps,
            "reads": self.reads, "result": result, "raises": None, "state": state, "test": self.test,
            "internal": False,
        }  # fmt: skip

    def _end_early(self):
        """The test did something the program cannot spell: keep what came before, as it stands now."""
        if self._open():
            self.closed, self.state = True, self._state()

    def _state(self):
        return self._quietly(program_text, self.klass, self.objects, self.view)

    def _quietly(self, describe, *args):
        """Describing reads the attributes the tests read, through the class's own properties: no step of the test."""
        self.depth += 1
        try:
            return describe(*args)
        finally:
            self.depth -= 1

    def _open(self):
        return self.test is not None and not self.closed

    def _step(self, kind, name, args, kwargs):
        """The step a call from outside the class makes, as literal data; None when it is none of the program's
        (another object's call, or the program is closed), False when the program cannot spell it."""
        if not self._open():
            return None
        if len(self.steps) >= MAX_STEPS:  # what comes after is not kept: the state is read as it stands
            self._end_early()
            return None
        if kind == "classmethod":
            if not args or args[0] is not self.klass:  # a subclass's call: not the deleted class's program
                return None
            return self._call_step(-1, name, args[1:], kwargs)
        if kind == "staticmethod":
            return self._call_step(-1, name, args, kwargs)
        receiver = args[0] if args else None
        if name == "__init__":
            return self._call_step(None, name, args[1:], kwargs) if type(receiver) is self.klass else None
        if id(receiver) not in self.index:
            return None
        if kind == "property":
            return ("get", self.index[id(receiver)], name)
        return self._call_step(self.index[id(receiver)], name, args[1:], kwargs)

    def _call_step(self, target, name, args, kwargs):
        refs, plain, named = [], list(args), dict(kwargs)
        for key, value in [*enumerate(args), *kwargs.items()]:
            if type(value) is self.klass:
                if id(value) not in self.index:
                    return False
                refs.append((key, self.index[id(value)]))
                if type(key) is int:
                    plain[key] = None
                else:
                    named[key] = None
        args_text, kwargs_text = literal_text(tuple(plain)), literal_text(named)
        if args_text is None or kwargs_text is None:
            return False
        # Read back from the text: a copy the test cannot change after the call.
        spelled = (ast.literal_eval(args_text), ast.literal_eval(kwargs_text), tuple(refs))
        return ("new", *spelled) if target is None else ("call", target, name, *spelled)

    def _wrapped(self, name, function, kind):
        recorder = self

        @functools.wraps(function)
        def recorded(*args, **kwargs):
            step = recorder._step(kind, name, args, kwargs) if recorder.depth == 0 else None
            if step is False:
                recorder._end_early()
            recorder.depth += 1
            try:
                result = function(*args, **kwargs)
            except Exception as error:
                if step:
                    recorder._add(step, None, raised_text(error))
                raise
            finally:
                recorder.depth -= 1
            if step:
                made = args[0] if step[0] == "new" else result
                if step[0] == "new":  # what a constructor gives is the instance: its outcome is that it returned
                    recorder._add(step, made, "('returned', None)")
                else:
                    recorder._add(step, made, recorder._quietly(returned_text, result, recorder.view))
            return result

        recorded.__regrow_recorded__ = True
        return recorded

    def _add(self, step, made, outcome):
        if not self._open():
            return
        if type(made) is self.klass:
            self.index[id(made)] = len(self.steps)
        self.steps.append(step)
        self.outcomes.append(outcome)
        self.objects.append(made)  # held, so that no later object takes its id
