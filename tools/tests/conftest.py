"""Shared pytest settings. `make test` sets SGLNODE_FORBID_SKIPS=1: it provisions everything the
tests need (Docker engine, images, nvcc, systemd-analyze), so there a skipped test means a broken
set-up, and it fails instead of passing silently."""

import os

import pytest

FORBID_SKIPS = os.environ.get("SGLNODE_FORBID_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if FORBID_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under SGLNODE_FORBID_SKIPS=1 (make test provisions it): {report.longrepr}"


def pytest_collectreport(report):
    if FORBID_SKIPS and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"module skipped under SGLNODE_FORBID_SKIPS=1: {report.longrepr}"
