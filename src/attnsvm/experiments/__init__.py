"""The papers' experiments: configs, tasks, checks and figures, grouped by paper.

``registry()`` discovers them (subpackages ``tf``, ``mm``, ``lm``, ``real``); running them,
resumably and in parallel, is :mod:`attnsvm.runner`; summarizing a results folder is
:mod:`attnsvm.report`.
"""

from attnsvm.experiments.base import Check, Experiment, ExperimentConfig, Task, check, register, registry
from attnsvm.experiments.config import build_config, parse_assignments, read_config_file

__all__ = ["Check", "Experiment", "ExperimentConfig", "Task", "check", "register", "registry", "build_config",
           "parse_assignments", "read_config_file"]

#: names that lived here before the runner and the report became their own layer (0.1); kept as aliases
_MOVED = {"run_experiment": "attnsvm.runner", "RunSummary": "attnsvm.runner", "write_report": "attnsvm.report"}


def __getattr__(name):
    """Deprecated aliases: ``attnsvm.experiments.run_experiment`` etc. now live in the runner and report layers."""
    if name not in _MOVED:
        raise AttributeError(f"module 'attnsvm.experiments' has no attribute {name!r}")
    import warnings

    warnings.warn(f"attnsvm.experiments.{name} moved to {_MOVED[name]}.{name}; the alias goes in 0.3",
                  DeprecationWarning, stacklevel=2)
    if name == "write_report":
        from attnsvm.report import write_report  # layer exception: deprecated alias (tests/test_layers.py)

        return write_report
    from attnsvm import runner  # layer exception: deprecated alias (tests/test_layers.py)

    return getattr(runner, name)
