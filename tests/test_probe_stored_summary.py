"""What ``attnsvm probe --out`` prints about its stored run (issue 42, item 9): heads, not tasks ("144 computed" for
72 heads read as 144 heads), and the checks by group with what each means, not a bare "checks 3/6 passed"."""

from __future__ import annotations

from attnsvm.cli.probe import check_groups, stored_lines


def _check(name, kind, verdict):
    return {"name": name, "kind": kind, "verdict": verdict, "passed": verdict == "pass"}


CHECKS = [_check("heads beyond their sink null", "qualitative", "fail"),
          _check("share of heads beyond their sink null", "qualitative", "fail"),
          _check("secondary (any bilinear head passes it): share above random", "qualitative", "inconclusive"),
          _check("every SVM compared with is certified", "integrity", "pass"),
          _check("corr lies in [-1, 1] in every row", "integrity", "pass")]


def _stored(**kw):
    base = {"dir": "/x/probe", "heads": 72, "tasks": 144, "computed": 144, "resumed": 0, "failed": [],
            "checks": len(CHECKS), "checks_passed": 2, "check_groups": check_groups(CHECKS)}
    return {**base, **kw}


def test_the_stored_line_counts_heads_and_tasks():
    first = stored_lines(_stored())[0]
    assert "72 heads (144 tasks: each head's and its null heads')" in first, first
    assert "144 computed, 0 resumed, 0 failed" in first
    # without null tasks a head is one task: no second count
    assert "72 tasks:" in stored_lines(_stored(tasks=72, computed=72))[0]
    assert "resumed: stored by an earlier run" in stored_lines(_stored(computed=0, resumed=144))[0]


def test_the_checks_say_which_and_whether_they_matter():
    text = "\n".join(stored_lines(_stored()))
    assert "checks 2/5 passed" not in text
    assert "integrity: 2/2 pass: whether the numbers above are sound" in text, text
    assert "the claim: 0/2 pass (2 fail): the verdict above restated" in text, text
    assert "a fail is the answer 'no', not a broken run" in text
    assert "secondary: 0/1 pass (1 inconclusive): against random selections" in text, text
    assert "/x/probe/checks.json" in text


def test_check_groups_put_each_check_in_one_group():
    g = check_groups(CHECKS)
    assert {k: v["n"] for k, v in g.items()} == {"integrity": 2, "claim": 2, "secondary": 1}
    assert g["claim"]["fail"] == 2 and g["integrity"]["pass"] == 2 and g["secondary"]["inconclusive"] == 1
    assert check_groups([]) == {}
