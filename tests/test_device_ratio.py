"""benchmarks/device_ratio.py: the device path's answers are compared with the numpy path's, and a
difference is reported (exit status 1, "DIFFERENT"), not hidden. Run here with device="cpu" (torch on the CPU)."""

import dataclasses
import importlib.util
import os

import pytest

pytest.importorskip("torch")

PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "device_ratio.py")


def _script():
    spec = importlib.util.spec_from_file_location("device_ratio", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_equal_answers_pass(capsys, tmp_path):
    out = tmp_path / "r.csv"
    assert _script().main(["--device", "cpu", "--planted", "12,4,5", "--dense", "8,4,5", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count(" equal\n") == 2 and "all equal: True" in text
    assert out.read_text().count("optimal,optimal") == 2


def test_a_different_device_answer_fails(capsys, monkeypatch):
    mod = _script()
    timed = mod._timed

    def off_by_1e_6(cs, formulation, method, device):
        sol, w, c = timed(cs, formulation, method, device)
        if device is not None:              # the device's norm moved beyond the 1e-8 the two may differ by
            sol = dataclasses.replace(sol, norm_value=sol.norm_value * (1 + 1e-6))
        return sol, w, c

    monkeypatch.setattr(mod, "_timed", off_by_1e_6)
    assert mod.main(["--device", "cpu", "--dense", "8,4,5"]) == 1
    assert "DIFFERENT" in capsys.readouterr().out
