"""Slow, obviously-correct reference SVM solvers (tests and benchmark only).

This is what research code does: a full ``d x d`` cvxpy variable and one constraint
per row, built in a Python loop. Returns ``None`` when the solver reports the
problem infeasible (as the research code does).
"""

from __future__ import annotations

import cvxpy as cp


def _solve(prob, solver):
    try:
        prob.solve(solver=solver)
    except cp.error.SolverError:
        return False
    return prob.status in ("optimal", "optimal_inaccurate")


def reference_att_svm(X, Z, select, norm="fro", solver=None):
    """Att-SVM with a full W variable. X (n,T,d), Z (n,d), select (n,). Returns W (d,d) or None."""
    n, T, d = X.shape
    W = cp.Variable((d, d))
    cons = []
    for i in range(n):
        for t in range(T):
            if t != select[i]:
                cons.append((X[i, select[i]] - X[i, t]) @ W @ Z[i] >= 1)
    obj = cp.norm(W, "fro") if norm == "fro" else cp.normNuc(W)
    prob = cp.Problem(cp.Minimize(obj), cons)
    solver = solver or ("CLARABEL" if norm == "fro" else "CLARABEL")
    return W.value if _solve(prob, solver) else None


def reference_gen_svm(X, Z, selected, norm="fro"):
    """Gen-SVM over all pairs (t in O_i ties; t in O_i vs tau not in O_i >= 1). Returns W or None."""
    n, T, d = X.shape
    W = cp.Variable((d, d))
    cons = []
    for i in range(n):
        for t1 in range(T):
            for t2 in range(t1 + 1, T):
                a, b = selected[i, t1], selected[i, t2]
                e = (X[i, t1] - X[i, t2]) @ W @ Z[i]
                if a and b:
                    cons.append(e == 0)
                elif a:
                    cons.append(e >= 1)
                elif b:
                    cons.append(-e >= 1)
    obj = cp.norm(W, "fro") if norm == "fro" else cp.normNuc(W)
    prob = cp.Problem(cp.Minimize(obj), cons)
    return W.value if _solve(prob, "CLARABEL") else None


def reference_seq_svm(X, select, causal=False):
    n, T, d = X.shape
    W = cp.Variable((d, d))
    cons = []
    for i in range(n):
        for k in range(T):
            for t in range(T):
                if t == select[i, k] or (causal and t > k):
                    continue
                cons.append((X[i, select[i, k]] - X[i, t]) @ W @ X[i, k] >= 1)
    prob = cp.Problem(cp.Minimize(cp.norm(W, "fro")), cons)
    return W.value if _solve(prob, "CLARABEL") else None


def reference_vector_svm(U, rhs):
    """min ||p|| s.t. U p >= rhs (rows). Returns p or None."""
    p = cp.Variable(U.shape[1])
    cons = [U[k] @ p >= rhs[k] for k in range(U.shape[0])]
    prob = cp.Problem(cp.Minimize(cp.norm(p)), cons)
    return p.value if _solve(prob, "CLARABEL") else None


def reference_soft_svm(X, Z, select, C, squared=False):
    n, T, d = X.shape
    W = cp.Variable((d, d))
    xi = cp.Variable((n, T), nonneg=True)
    cons = []
    for i in range(n):
        for t in range(T):
            if t != select[i]:
                cons.append((X[i, select[i]] - X[i, t]) @ W @ Z[i] >= 1 - xi[i, t])
    obj = (cp.sum_squares(W) if squared else cp.norm(W, "fro")) + C * cp.sum(xi)
    prob = cp.Problem(cp.Minimize(obj), cons)
    return (W.value, prob.value) if _solve(prob, "CLARABEL") else (None, None)
