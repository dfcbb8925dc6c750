"""Stand-ins for the wire models that regrow's judging modules import, shipped into an exported task's /tests as
`proto/tasks.py` and `proto/observations.py`: the task image has no pydantic, and checks.py, evidence.py and
verdict.py only read the models' fields and copy them with changes. Standard library only."""

HASH_SEED = 0  # proto.tasks' default; the verifier gives each run the task's own hash seed
RewardMode = str


class Model:
    """A wire model's fields as attributes, made from keywords and copied with changes as pydantic's `model_copy`."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def model_copy(self, update=None):
        return type(self)(**{**self.__dict__, **(update or {})})


class IoCheck(Model):
    """One recorded call and its expected outcome, as `proto.tasks.IoCheck` dumps it."""


class DeletedUnit(Model):
    """A deleted unit: its `path`, `qualname` and `kind`."""


class TaskRecord(Model):
    """What verdict.score reads of a task: FAIL_TO_PASS, PASS_TO_PASS and the deleted units."""


class TestOutcome(Model):
    """One test's or check's outcome in the details."""


class UnitCredit(Model):
    """One deleted unit's credit."""


class RewardDetails(Model):
    """The reward and its parts; score sets the fields below only where the grading was stopped or forged."""

    error = None
    tampered = False
    tamper_reasons = ()
