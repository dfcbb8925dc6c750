"""pytest plugin, loaded in the sandbox as `-p regrow_test_context`: coverage of the run, switched to each test's node
id as its dynamic context, for any pytest command. REGROW_COVERAGE_RC names coverage.py's config file."""

import os
import warnings

import coverage
import pytest

# Started on import, before the conftests load: what runs while the package is imported is measured too.
_coverage = coverage.Coverage(config_file=os.environ["REGROW_COVERAGE_RC"])
_coverage.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _coverage.switch_context(item.nodeid)
    yield
    _coverage.switch_context("")


def pytest_unconfigure(config):
    # Ours, not the suite's: a warning here would fail a suite that turns warnings into errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _coverage.stop()
        _coverage.save()
