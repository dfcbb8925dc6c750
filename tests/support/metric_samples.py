"""The samples of a Prometheus text exposition, read with prometheus_client's own parser: tests check names, labels
and values, not how one client release spells a line (label order, float format)."""

from prometheus_client.parser import text_string_to_metric_families


def metric_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """{(sample name, its labels): value} of every sample in `text`."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample `name` whose labels include `labels` (None when there is none)."""
    found = [
        value for (named, held), value in metric_samples(text).items() if named == name and set(labels.items()) <= held
    ]
    assert len(found) <= 1, f"{len(found)} samples of {name} match {labels}"
    return found[0] if found else None
