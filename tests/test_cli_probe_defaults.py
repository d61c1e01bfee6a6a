"""``attnsvm probe``'s settings have one default and one validation each, ProbeConfig's (issue 41, "one ProbeConfig
from the CLI down ... one default per setting, one validation"): the defaults ``--help`` shows are read from
ProbeConfig's fields, an unset option is None all the way to ProbeConfig, and a bad value is refused by
ProbeConfig's validation alone, naming the option, in one line with exit status 2."""

import inspect
import re

import click
import pytest
from click.testing import CliRunner

from attnsvm.cli import cli
from attnsvm.cli.probe import run_probe
from attnsvm.real.probe_config import ProbeConfig

#: each ``attnsvm probe`` option that sets a ProbeConfig field, and that field
SETTINGS = {
    "--layers": "layers", "--heads": "heads", "--n-sentences": "n_sentences", "--svm-sentences": "svm_sentences",
    "--threshold": "threshold", "--query": "query", "--seed": "seed", "--query-seed": "query_seed",
    "--max-length": "max_length", "--view-sentences": "view_sentences", "--null-draws": "null_draws",
    "--null-kind": "null_kind", "--null-stop": "null_stop", "--spectrum-draws": "spectrum_draws",
    "--baseline-max-m": "baseline_max_m", "--transplant-draws": "transplant_draws", "--device": "device",
    "--statistic": "statistic",
}


def _probe():
    command = cli.commands["probe"]
    return command, click.Context(command, info_name="probe")


def _shown_default(option, ctx):
    record = option.get_help_record(ctx)
    m = re.search(r"\[default: ([^\]]*)\]", " ".join(record[1].split())) if record else None
    return m.group(1) if m else None


def _expected(option, default):
    if default is None:
        return None
    if isinstance(default, bool):  # a flag pair shows the flag that is on by default, as click writes it
        return (option.opts if default else option.secondary_opts)[0].lstrip("-")
    return str(default)


def test_every_shown_default_is_probeconfigs():
    command, ctx = _probe()
    options = {p.opts[0]: p for p in command.params if isinstance(p, click.Option)}
    assert set(SETTINGS) <= set(options)
    # every option named like a ProbeConfig field is in the table (none keeps a default of its own)
    assert {o for o, p in options.items() if p.name in ProbeConfig.model_fields} <= set(SETTINGS)
    for opt, field in SETTINGS.items():
        option = options[opt]
        assert option.default is None, opt  # unset: None, left out, ProbeConfig's default applies
        assert _shown_default(option, ctx) == _expected(option, ProbeConfig.model_fields[field].default), opt
    # e.g. the values the options once repeated beside ProbeConfig
    assert _shown_default(options["--n-sentences"], ctx) == "256"
    assert _shown_default(options["--null-stop"], ctx) == "null-stop"


def test_run_probe_defaults_no_setting():
    params = inspect.signature(run_probe).parameters
    for field in SETTINGS.values():
        if field in params:
            assert params[field].default is None, field


@pytest.mark.parametrize("args, message", [
    (["--null-draws", "-1"], "--null-draws: Input should be greater than or equal to 0, got -1"),
    (["--n-sentences", "0"], "--n-sentences: Input should be greater than 0, got 0"),
    (["--view-sentences", "-2"], "--view-sentences: Input should be greater than or equal to 0, got -2"),
    (["--baseline-max-m", "0"], "--baseline-max-m: Input should be greater than 0, got 0"),
    (["--threshold", "1.5"], "--threshold: Input should be less than or equal to 1, got 1.5"),
])
def test_a_bad_value_is_refused_once_by_probeconfig_naming_the_option(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["probe", "--no-store", *args])
    assert r.exit_code == 2 and r.stderr == f"attnsvm: error: {message}\n", r.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_lists_every_option():
    command, _ = _probe()
    r = CliRunner().invoke(cli, ["probe", "--help"])
    assert r.exit_code == 0
    for p in command.params:
        if isinstance(p, click.Option) and not p.hidden:  # hidden: --curve, removed in 0.3 (one line saying so)
            for opt in p.opts + p.secondary_opts:
                assert opt in r.stdout, opt
    flat = " ".join(r.stdout.split())
    assert "[default: 256]" in flat and "[default: sink]" in flat and "[default: 8]" in flat
