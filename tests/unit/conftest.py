"""Fixtures shared by tests/unit's modules: `native_runner`, the C runner built for this host
(tests/unit/test_emulated.py and test_hostile_inputs.py run it)."""

from __future__ import annotations

import os
import tarfile

import pytest
from click.testing import CliRunner
from test_c_api import two_in_two_out_model

from tvmc.cli import cli
from tvmc.driver import compile_model
from tvmc.package import save_artifact
from tvmc.target import resolve_target


@pytest.fixture(scope="module")
def native_runner(tmp_path_factory):
    """A folder with a native artifact's mod.so and mod.params, and tvmc_run built by
    `tvmc build-runner` beside them."""
    tmp = tmp_path_factory.mktemp("runner")
    tar = save_artifact(compile_model(two_in_two_out_model(), resolve_target("native")), tmp / "mod.tar")
    with tarfile.open(tar) as t:
        for name in ("mod.so", "mod.params"):
            (tmp / name).write_bytes(t.extractfile(name).read())
    r = CliRunner().invoke(cli, ["build-runner", str(tar), "-o", str(tmp / "bin" / "tvmc_run")])
    assert r.exit_code == 0, r.output
    os.replace(tmp / "bin" / "tvmc_run", tmp / "tvmc_run")
    assert "run it beside mod.so and mod.params" in r.output
    return tmp
