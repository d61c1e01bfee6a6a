"""The stored probe's tasks get the run's ``--max-memory`` as an argument (issue 41: "``max_memory`` passed
explicitly on both paths"), never through ``$ATTNSVM_MAX_MEMORY``: a tiny limit is refused inside the task, by
the model's loading or by the SVM, with the environment variable unset, and the message names ``max_memory``."""

import os

import pytest

pytest.importorskip("transformers")

from attnsvm.experiments.real.probe_run import ProbeRun  # noqa: E402
from attnsvm.memory import ENV_VAR  # noqa: E402
from attnsvm.real.probe_config import ProbeConfig  # noqa: E402
from attnsvm.runner import run_experiment  # noqa: E402
from test_probe_notebook import TEXTS, _objects, _save  # noqa: E402

#: above the planner's estimate of these tiny probes (a few hundred bytes), below any model, forward or SVM
LIMIT = 4096


@pytest.fixture
def config(tmp_path, monkeypatch):
    """A tiny probe (a random-weight BERT of its own, so no process cache holds it yet), the variable unset."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    model, _ = _objects("bert")
    path = _save(model, tmp_path / "model")
    return ProbeConfig(sentences=TEXTS, layers=[0], heads=[0], svm_sentences=3, null_draws=0, model=path)


class _Watched(ProbeRun):
    """The probe, recording ``$ATTNSVM_MAX_MEMORY`` as its tasks see it."""

    seen: list = []

    def run_task(self, config, task, max_memory=None):
        self.seen.append(os.environ.get(ENV_VAR))
        return super().run_task(config, task, max_memory=max_memory)


def _failures(exp, config, outdir):
    summary = run_experiment(exp, config, str(outdir), progress=False, max_memory=LIMIT)
    assert summary.computed == 0 and len(summary.failed) == summary.tasks == 1
    return [f["error"] for f in summary.failed]


def test_a_stored_probe_refuses_a_tiny_limit_inside_the_task(config, tmp_path):
    exp = _Watched()
    exp.seen.clear()
    errors = _failures(exp, config, tmp_path / "out")
    assert exp.seen == [None]  # the runner set no environment variable
    for e in errors:  # the model's loading, inside the task, against the limit it was handed
        assert e.startswith("ResourceLimitError: ") and "more than the memory limit 4.0 KiB (max_memory)" in e, e


def test_the_limit_reaches_the_svm_of_a_stored_task(config, tmp_path):
    """With the model and its forward pass already loaded in this process (a task run without a limit), the
    tiny limit reaches the SVM: refused there, though its arrays are far below the 16 MiB that the package limit
    leaves unchecked (an SVM that saw the limit only through the environment would run)."""
    exp = ProbeRun()
    warm = exp.run_task(config, exp.tasks(config)[0])  # loads the model and its forward pass, solves the SVM
    assert warm["svm_status"].iloc[0] == "optimal"
    errors = _failures(exp, config, tmp_path / "out")
    for e in errors:
        assert e.startswith("ResourceLimitError: ") and "solution W" in e and "(max_memory)" in e, e
