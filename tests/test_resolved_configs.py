"""What a user composes stays what it was: each option of each config group resolves to the configuration stored in
tests/resolved/ (refreshed only on purpose: `python tests/resolved_configs.py`, then review the diff)."""

import json

import pytest
from resolved_configs import STORED, conf_dir_and_register, file_for, options, resolved

CONF = conf_dir_and_register()


def test_every_option_has_a_stored_configuration():
    assert sorted(file_for(o).name for o in options(CONF)) == sorted(p.name for p in STORED.glob("*.json"))


@pytest.mark.parametrize("option", options(CONF))
def test_an_option_resolves_to_its_stored_configuration(option):
    assert resolved(CONF, option) == json.loads(file_for(option).read_text()), (
        f"{option} composes differently from {file_for(option)}: if that is deliberate, run "
        "`python tests/resolved_configs.py` and review the diff"
    )
