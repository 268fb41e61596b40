"""Shared fixtures.  Kernel tests parametrise over every ISA path this host can run;
a path the host lacks is skipped with its name (the one accepted reason to skip)."""
import os

import numpy as np
import pytest

import h3cy
from h3cy import _kernels

ALL_ISAS = list(_kernels.ISA_NAMES)
HOST_ISAS = h3cy.ops.available_isas()
IN_CI = os.environ.get("CI") == "true"


def missing_tool(reason):
    """An optional toolchain is absent: a failure under CI=true (CI installs it), a skip
    naming the Debian package elsewhere."""
    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def isa_params(include_ref=True):
    """pytest params for every ISA name; unsupported ones are skipped with a reason."""
    out = []
    for name in ALL_ISAS:
        if name == "ref" and not include_ref:
            continue
        marks = []
        if name not in HOST_ISAS:
            marks.append(pytest.mark.skip(reason=f"ISA path '{name}' not available on this CPU"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
