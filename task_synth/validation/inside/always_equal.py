"""The body of the always-equal stand-in: an object equal to everything, truthy, empty, and itself under any attribute
or call, so it passes any test that only compares. stand_ins.py splices the function's body into the deleted unit."""


def always_equal():
    class _AlwaysEqual:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        def __bool__(self):
            return True

        def __hash__(self):
            return 0

        def __iter__(self):
            return iter(())

        def __len__(self):
            return 0

        def __getattr__(self, name):
            return self

        def __call__(self, *args, **kwargs):
            return self

    return _AlwaysEqual()
