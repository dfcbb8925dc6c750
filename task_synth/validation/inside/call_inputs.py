"""A recorded call's inputs as one pickle a fresh interpreter can load: a method's receiver, and the arguments no
literal or recipe spells, as they were before the call (base64 text). A function no module holds by its name (a
test's lambda, the library's own `lambda x: True` default) travels as its recipe, which `built` makes anew where the
pickle is loaded.

Shipped beside the recorder plugin as `regrow_call_inputs`. Stdlib only: it runs in the repository's interpreter.
"""

import base64
import io
import pickle
import types

try:  # in a sandbox the values module is copied beside this one; in regrow it is proto's
    from regrow_argument_recipes import function_recipe
    from regrow_call_values import built
except ImportError:
    from proto.call_values import built
    from task_synth.validation.inside.argument_recipes import function_recipe

MAX_INPUTS = 32 * 1024  # bytes of a call's pickled receiver and arguments


def inputs_text(receiver, arguments, library_files):
    """(receiver, arguments) as a base64 pickle a fresh interpreter can load, or None when they do not pickle small.
    `arguments` is (args, kwargs) where they are no literals, else None (the check's literal text holds them); a
    function defined in `library_files` or a test goes as its recipe."""
    try:
        data = _pickled((receiver, arguments), library_files)
        if len(data) > MAX_INPUTS or type(pickle.loads(data)[0]) is not type(receiver):
            return None
    except Exception:  # locks, lambdas, open files: no check of this call
        return None
    return base64.b64encode(data).decode()


def _pickled(value, library_files):
    """pickle's own bytes where they do, else with functions as recipes: the recipe pickler calls back into Python for
    every object, which a receiver pickled at every call cannot afford."""
    try:
        return pickle.dumps(value, protocol=4)
    except (pickle.PicklingError, AttributeError, TypeError):
        buffer = io.BytesIO()
        _FunctionsAsRecipes(buffer, library_files).dump(value)
        return buffer.getvalue()


class _FunctionsAsRecipes(pickle.Pickler):
    """A pickler that carries a function no module holds by its name (a test's lambda, the library's own `lambda x:
    True` default) as its recipe, which `built` makes anew where the pickle is loaded: an object that holds one
    (more-itertools' bucket holds its key) then pickles, where pickle alone refuses it."""

    def __init__(self, buffer, library_files):
        super().__init__(buffer, protocol=4)
        self.library_files = library_files

    def reducer_override(self, obj):
        if type(obj) is types.FunctionType:
            recipe = function_recipe(obj, self.library_files)
            if recipe is not None:
                return built, (recipe,)
        return NotImplemented
