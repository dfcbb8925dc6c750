"""States of the instances of a class whose methods were deleted, kept as the visible tests call its other methods.

A deleted method called on one of them is a call no visible test makes: the only unseen call a method with no
argument to vary can have (h11's `Connection.next_event()`). Each state is a pickle of the receiver as it stood
before one of those calls, taken while a test runs. Shipped beside the recorder plugin as `regrow_receiver_pool`.
Stdlib only: it runs in the repository's interpreter.
"""

import functools
import inspect

MAX_RECEIVERS = 16  # distinct states kept of one class's instances
MAX_TRIES = 200  # pickles attempted for one class: a big receiver costs one at every call


class ReceiverPool:
    """The states of one class's instances. `pickled(receiver)` is the recorder's pickle text (None when it does not
    pickle small); `in_test()` whether a test is running."""

    def __init__(self, module, klass, pickled, in_test):
        self.module, self.klass = module, klass
        self.pickled, self.in_test = pickled, in_test
        self.states, self.tries, self.busy = {}, 0, False

    def wrap(self, deleted):
        """Harvest states at each call of the class's plain methods other than the `deleted` ones."""
        for name, value in list(vars(self.klass).items()):
            if name.startswith("__") or name in deleted or not inspect.isfunction(value):
                continue
            if getattr(value, "__regrow_recorded__", False):
                continue
            setattr(self.klass, name, self._harvesting(value))

    def _harvesting(self, function):
        @functools.wraps(function)
        def harvested(*args, **kwargs):
            if args:
                self._keep(args[0])
            return function(*args, **kwargs)

        harvested.__regrow_recorded__ = True
        return harvested

    def _keep(self, receiver):
        if type(receiver) is not self.klass or self.busy or not self.in_test():
            return
        if len(self.states) >= MAX_RECEIVERS or self.tries >= MAX_TRIES:
            return
        self.busy, self.tries = True, self.tries + 1  # pickling may call into the class again
        try:
            text = self.pickled(receiver)
        finally:
            self.busy = False
        if text is not None:
            self.states.setdefault(text, None)

    def record(self):
        """The pool as one entry of the recorder's output."""
        return {"module": self.module, "qualname": self.klass.__qualname__, "receivers": list(self.states)}
