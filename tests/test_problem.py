import zipfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attnsvm import ProblemFileError, TokenProblem, ValidationError, random_problem


def make(n=3, T=4, d=5, seed=0):
    rng = np.random.default_rng(seed)
    return dict(X=rng.standard_normal((n, T, d)), Z=rng.standard_normal((n, d)),
                Y=np.array([1, -1, 1][:n] + [1] * max(0, n - 3)), v=rng.standard_normal(d))


def test_valid_problem_is_float64_and_readonly():
    kw = make()
    p = TokenProblem(kw["X"].astype(np.float32), kw["Z"], Y=kw["Y"].astype(int), v=kw["v"])
    assert p.X.dtype == p.Z.dtype == p.Y.dtype == p.v.dtype == np.float64
    assert p.shape == (3, 4, 5) and p.mode == "cross"
    assert np.array_equal(p.queries, p.Z)
    with pytest.raises(ValueError):
        p.X[0, 0, 0] = 1.0


def test_self_attention_queries_and_negative_index():
    kw = make()
    p = TokenProblem(kw["X"], query_index=-1, Y=kw["Y"], v=kw["v"])
    assert p.mode == "self" and p.query_index == 3
    np.testing.assert_array_equal(p.queries, kw["X"][:, 3])


def test_prompt_problem_has_no_queries_but_keys():
    kw = make()
    W = np.diag([1.0, 2, 3, 4, 5])
    p = TokenProblem(kw["X"], Y=kw["Y"], v=kw["v"], W=W)
    assert p.mode == "prompt"
    np.testing.assert_allclose(p.keys, kw["X"] @ W)
    with pytest.raises(ValidationError, match="prompt"):
        p.queries


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(X=np.zeros((3, 4))), r"X must have shape \(n, T, d\)"),
        (dict(X=np.zeros((3, 1, 5))), "T >= 2"),
        (dict(X=np.zeros((0, 4, 5))), "at least one sample"),
        (dict(X=np.full((3, 4, 5), np.nan)), "X must be finite"),
        (dict(X=np.array([[["a"]]])), "X must be a numeric array"),
        (dict(Z=np.zeros((3, 4))), r"Z must have shape \(n, d\) = \(3, 5\)"),
        (dict(Z=np.zeros((2, 5))), r"Z must have shape \(n, d\)"),
        (dict(Z=np.array([[np.inf] * 5] * 3)), "Z must be finite"),
        (dict(Y=np.array([1, 0, 1])), r"Y must hold labels in \{-1, \+1\}"),
        (dict(Y=np.array([1, -1])), r"Y must have shape \(n,\) = \(3,\)"),
        (dict(v=np.zeros(4)), r"v must have shape \(d,\) = \(5,\)"),
        (dict(v=np.zeros((5, 1))), r"v must have shape"),
        (dict(W=np.zeros((5, 4))), r"W must have shape \(d, d\)"),
    ],
)
def test_bad_input_names_argument(change, match):
    kw = make()
    kw.update(change)
    with pytest.raises(ValueError, match=match):
        TokenProblem(kw.pop("X"), kw.pop("Z"), **kw)


def test_z_and_query_index_exclusive_and_index_range():
    kw = make()
    with pytest.raises(ValidationError, match="not both"):
        TokenProblem(kw["X"], kw["Z"], query_index=0)
    with pytest.raises(ValidationError, match="query_index must lie"):
        TokenProblem(kw["X"], query_index=4)
    with pytest.raises(ValidationError, match="query_index must be an integer"):
        TokenProblem(kw["X"], query_index=1.5)


def test_save_load_round_trip(tmp_path):
    kw = make()
    for p in (
        TokenProblem(kw["X"], kw["Z"], Y=kw["Y"], v=kw["v"], name="cross"),
        TokenProblem(kw["X"], query_index=2, name="self no labels"),
        TokenProblem(kw["X"], Y=kw["Y"], v=kw["v"], W=np.eye(5)),
    ):
        path = tmp_path / "p.npz"
        p.save(path)
        q = TokenProblem.load(path)
        assert q == p and q.mode == p.mode


@given(n=st.integers(1, 4), T=st.integers(2, 5), d=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_round_trip_property(tmp_path_factory, n, T, d, seed):
    p = random_problem(n, T, d, seed)
    path = tmp_path_factory.mktemp("rt") / "p.npz"
    p.save(path)
    assert TokenProblem.load(path) == p


def test_corrupt_truncated_and_hostile_files(tmp_path):
    p = random_problem(2, 3, 4, 0)
    good = tmp_path / "good.npz"
    p.save(good)
    raw = good.read_bytes()
    cases = {
        "truncated.npz": raw[: len(raw) // 2],
        "garbage.npz": b"this is not an npz file at all",
        "empty.npz": b"",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    # a pickled object array inside a valid zip: must be refused, never unpickled
    hostile = tmp_path / "hostile.npz"
    np.savez(hostile, format=np.array("attnsvm.TokenProblem"), version=np.array(1), X=np.array([object()], dtype=object))
    # a real npz that is not ours
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.zeros(3))
    # ours but with a wrong shape inside
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, format=np.array("attnsvm.TokenProblem"), version=np.array(1), X=np.zeros((2, 3)))
    for name in list(cases) + ["hostile.npz", "foreign.npz", "wrong.npz", "missing.npz"]:
        with pytest.raises(ProblemFileError):
            TokenProblem.load(tmp_path / name)
    with pytest.raises(ProblemFileError, match="unpickling|pickle"):
        TokenProblem.load(hostile)
    with pytest.raises(ProblemFileError, match="not an attnsvm problem file"):
        TokenProblem.load(foreign)
    with pytest.raises(ProblemFileError, match="X must have shape"):
        TokenProblem.load(wrong)
    # a broken zip member (bit flip in the compressed payload region)
    flipped = bytearray(raw)
    flipped[60] ^= 0xFF
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    try:
        q = TokenProblem.load(tmp_path / "flipped.npz")
    except ProblemFileError:
        pass
    else:  # the flip hit a byte numpy does not check: the result must still be a valid problem
        assert isinstance(q, TokenProblem)
    assert zipfile.is_zipfile(good)


def test_stack_batches_equal_shapes():
    ps = [random_problem(3, 4, 5, s) for s in range(4)]
    batch = TokenProblem.stack(ps)
    assert batch.X.shape == (4, 3, 4, 5) and batch.queries.shape == (4, 3, 5)
    assert batch.Y.shape == (4, 3) and batch.v.shape == (4, 5) and batch.W is None and len(batch) == 4
    np.testing.assert_array_equal(batch.X[2], ps[2].X)
    selfp = [random_problem(3, 4, 5, s, mode="self") for s in range(2)]
    np.testing.assert_array_equal(TokenProblem.stack(selfp).queries[1], selfp[1].X[:, 0])
    with pytest.raises(ValidationError, match="share"):
        TokenProblem.stack([random_problem(3, 4, 5, 0), random_problem(3, 4, 6, 0)])
    with pytest.raises(ValidationError, match="attention mode"):
        TokenProblem.stack([ps[0], selfp[0]])
    with pytest.raises(ValidationError, match="non-empty"):
        TokenProblem.stack([])
    with pytest.raises(ValidationError, match="expected TokenProblem"):
        TokenProblem.stack([ps[0], "x"])
