"""AUGMENT at K = 3: cumulant propagation with a matrix-valued radial fourth cumulant and the diagrams of cost 3.

ARC's reference (``mlp_kprop(..., k_max=3, kind=AUGMENT, factor=...)``, see ``_cumulant``) tracks, per layer,
the mean, the covariance, the whole third cumulant and the radial part of the fourth, ``Sym(A x I)`` after the
ReLU with A a symmetric matrix (``c4 Sym(I x I)`` is its trace part); the linear step maps it to
``Sym(W^T A W x g)``, ``g = W^T W``. The nonlinear step sums every Edgeworth diagram of power-counting cost
``k(nu) = 1 + sum_v (|v| - 1 - 1[v even]) <= 4`` (the paper's eq. (14), the cap raised by one), for the joint
cumulants of powers of at most three distinct neurons (``E h^p``, ``kappa(h_i^p, h_j^q)``, ``kappa(h_i, h_j,
h_k)``, ``kappa(h_i^2, h_j, h_k)``), turns them into the cumulants of h exactly, and projects the fourth
cumulant onto ``Sym(A x I)``: ``A = 12 a1 M + 24 a2 tr(M) I`` with ``M_ab = sum_i kappa_iiab``, the
coefficients of the harmonic projection of degree 4 onto radial index >= 1.

The reference has two estimates under this name, and so has this module:

* ``augment`` (unfactored): the third cumulant is a dense n^3 tensor and every diagram is kept, among them
  the covariance triangle ``Sigma_ij Sigma_jk Sigma_ki`` and ``kappa_ijk Sigma_jk``, which have no
  low-rank form; its linear step costs O(n^4) a layer.
* ``augment-factored``: the third cumulant in factored (CP) form, and, as the reference's factored AUGMENT
  does, only the diagrams that factor: on the three-neuron slice the hypertrees (two-leg paths, the
  kappa_3 block, the fourth cumulant's ``(2,1,1)`` slices), and no diagram that multiplies the all-distinct
  block of kappa_3 with another block. O(n^3) a layer, plus O(n^2) per factor column.

The diagrams are enumerated here (``diagrams``), each is expanded into products of the slices it reads
(``_terms``), and the products are evaluated as the slice needs them: one- and two-neuron slices as
vectors and matrices; ``kappa(h_i^2, h_j, h_k)`` only through its trace over i (all the projection reads),
one matrix product per diagram at most; the three-neuron slice densely, as CP factors, or traced.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from dataclasses import dataclass

import flopscope.numpy as fnp

#: The cost cap of the summed diagrams: k_max - 1 at K = 3, plus one for AUGMENT.
BUDGET = 3
#: The highest cumulant tracked (the fourth, radial).
MAX_DEGREE = 4
#: The third cumulant's dtype (dense tensor or factors), as the grader bills it: float32, like BASE and SIMPLE.
THIRD_DTYPE = fnp.float32
Vec = tuple[int, ...]

# ---------------------------------------------------------------------------
# the diagrams (combinatorics only: no FLOPs)
# ---------------------------------------------------------------------------


def _cost(block: Vec) -> int:
    """Power-counting cost of a cumulant block: an entry of a degree-|v| block is O(n^{-cost/2})."""
    return sum(block) - 1 - all(x % 2 == 0 for x in block)


@functools.cache
def _partitions(total: Vec) -> tuple[tuple[Vec, ...], ...]:
    """Every multiset of nonzero vectors summing to ``total`` (vector partitions), blocks in a fixed order."""
    vectors = [v for v in itertools.product(*(range(x + 1) for x in total)) if any(v)]
    found: list[tuple[Vec, ...]] = []

    def extend(rest: Vec, start: int, blocks: list[Vec]) -> None:
        if not any(rest):
            found.append(tuple(blocks))
            return
        for index in range(start, len(vectors)):
            v = vectors[index]
            if all(a <= b for a, b in zip(v, rest, strict=True)):
                extend(tuple(b - a for a, b in zip(v, rest, strict=True)), index, [*blocks, v])

    extend(total, 0, [])
    return tuple(found)


def _connected(part: tuple[Vec, ...], m: int) -> bool:
    root = list(range(m))

    def find(a: int) -> int:
        while root[a] != a:
            a = root[a]
        return a

    for block in part:
        support = [a for a in range(m) if block[a]]
        for a in support[1:]:
            root[find(a)] = find(support[0])
    return len({find(a) for a in range(m)}) == 1


def _mixed(part: tuple[Vec, ...]) -> bool:
    """The Gaussian keeps each neuron's mean and variance: no block of degree <= 2 sits on one neuron."""
    return all(sum(v) > 2 or sum(1 for x in v if x) > 1 for v in part)


def coefficient(part: tuple[Vec, ...]) -> float:
    """The Edgeworth weight of a diagram: ``1 / prod_v (c(v)! prod_a v_a!^c(v))``, c(v) the block's repeats."""
    denominator = 1
    for block, repeats in Counter(part).items():
        denominator *= math.factorial(repeats) * math.prod(math.factorial(x) for x in block) ** repeats
    return 1.0 / denominator


def is_hypertree(part: tuple[Vec, ...]) -> bool:
    """Whether the blocks' supports form a hypertree once parallel two-neuron blocks are merged: exactly the
    diagrams with an O(n)-rank factored form."""
    counts = Counter(frozenset(a for a, x in enumerate(v) if x) for v in part)
    if any(c > 1 and len(s) != 2 for s, c in counts.items()):
        return False
    edges = list(counts)
    if any(len(a & b) >= 2 for i, a in enumerate(edges) for b in edges[i + 1:]):
        return False
    vertices = set().union(*edges) if edges else set()
    return sum(len(e) - 1 for e in edges) == max(len(vertices) - 1, 0)


def kept_when_factored(powers: Vec, part: tuple[Vec, ...]) -> bool:
    """The reference's factored AUGMENT keeps, on the three-neuron slice, the hypertrees, and elsewhere no
    diagram that multiplies kappa_3's all-distinct block with another block."""
    if powers == (1, 1, 1):
        return is_hypertree(part)
    return len(part) == 1 or (1, 1, 1) not in part


@functools.cache
def diagrams(m: int) -> tuple[tuple[Vec, ...], ...]:
    """Every labelled diagram on m distinct neurons: connected, mixed, blocks of degree <= 4, cost <= BUDGET."""
    found = []
    for total in itertools.product(range(2 * BUDGET + 1), repeat=m):
        if sum(total) > 2 * BUDGET:
            continue
        for part in _partitions(total):
            if (all(sum(v) <= MAX_DEGREE for v in part) and sum(_cost(v) for v in part) <= BUDGET
                    and _mixed(part) and _connected(part, m)):
                found.append(part)
    return tuple(found)


# ---------------------------------------------------------------------------
# diagrams as products of slices
# ---------------------------------------------------------------------------

#: Two-neuron slices by the block's multiplicities on its (lower, higher) neuron, each indexed [lower, higher]
#: with a zero diagonal: the covariance, kappa_3's kappa_iij, kappa_4's kappa_iiij and kappa_iijj.
_PAIR_SLICES = {(1, 1): "S", (2, 1): "Q", (1, 2): "Qt", (3, 1): "R", (1, 3): "Rt", (2, 2): "P"}
_ONE_SLICES = {3: "d", 4: "e"}
_TRANSPOSED = {"S": "S", "Q": "Qt", "Qt": "Q", "R": "Rt", "Rt": "R", "P": "P", "A": "A", "g": "g"}
#: Which diagrams a sum keeps: every one (the unfactored estimate), those the factored estimate keeps, or
#: those it drops (what the unfactored one adds to it).
ALL, FACTORED, DROPPED = "all", "factored", "dropped"


@dataclass(frozen=True)
class _Term:
    """``coef * prod(factors) * prod_a W(k_a, p_a)``: factors are (neurons, slice name), over one neuron a
    vector, over two a matrix indexed [lower, higher]; ``k3`` is kappa_3's all-distinct block."""

    coef: float
    wick: tuple[tuple[int, int], ...]  # (k_a, p_a) per neuron
    factors: tuple[tuple[tuple[int, ...], str], ...]


def _block_products(block: Vec) -> list[tuple[float, list[tuple[tuple[int, ...], str]]]]:
    """One block as a sum of products of named slices (kappa_4's three-neuron slices of ``Sym(A x g)`` are four
    products of A and g)."""
    support = tuple(a for a, x in enumerate(block) if x)
    mults = tuple(block[a] for a in support)
    if len(support) == 1:
        return [(1.0, [(support, _ONE_SLICES[mults[0]])])]
    if len(support) == 2:
        return [(1.0, [(support, _PAIR_SLICES[mults])])]
    if mults == (1, 1, 1):
        return [(1.0, [(support, "k3")])]
    doubled = support[mults.index(2)]
    b, c = (a for a in support if a != doubled)
    ab, ac = tuple(sorted((doubled, b))), tuple(sorted((doubled, c)))
    # kappa_aabc = (A_aa g_bc + A_bc g_aa + 2 A_ab g_ac + 2 A_ac g_ab) / 6
    return [(1 / 6, [((doubled,), "dA"), ((b, c), "g")]), (1 / 6, [((b, c), "A"), ((doubled,), "dg")]),
            (1 / 3, [(ab, "A"), (ac, "g")]), (1 / 3, [(ac, "A"), (ab, "g")])]


@functools.cache
def _terms(powers: Vec, which: str, third: bool, fourth: bool) -> tuple[_Term, ...]:
    """The slice ``kappa(h^powers)`` at distinct neurons as products of the pre-activation's slices; diagrams
    reading a cumulant that is not carried are left out."""
    m = len(powers)
    found = []
    for part in diagrams(m):
        if any(sum(v) == 3 for v in part) and not third or any(sum(v) == 4 for v in part) and not fourth:
            continue
        if which != ALL and kept_when_factored(powers, part) != (which == FACTORED):
            continue
        wick = tuple((sum(v[a] for v in part), powers[a]) for a in range(m))
        for choice in itertools.product(*(_block_products(v) for v in part)):
            coef = coefficient(part) * math.prod(c for c, _ in choice)
            found.append(_Term(coef, wick, tuple(f for _, fs in choice for f in fs)))
    return tuple(found)


@dataclass(frozen=True)
class _Traced:
    """A product on (i, j, k) to be summed over i: ``coef f_i x_ij y_ik [kappa_ijk] u_j v_k c_jk``, each of f, u,
    v a Wick coefficient ``(k, p)`` times named vectors, x, y, c products of named matrices."""

    coef: float
    f: tuple
    u: tuple
    v: tuple
    x: tuple[str, ...]
    y: tuple[str, ...]
    c: tuple[str, ...]
    kappa3: bool

    def key(self) -> tuple:
        return (self.f, self.u, self.v, self.x, self.y, self.c, self.kappa3)

    def swapped(self) -> _Traced:
        """The same product with j and k exchanged (its value transposed)."""
        return _Traced(self.coef, self.f, self.v, self.u, self.y, self.x,
                       tuple(sorted(_TRANSPOSED[name] for name in self.c)), self.kappa3)


def _as_traced(term: _Term) -> _Traced:
    names: dict[tuple[int, ...], list[str]] = {}
    for axes, name in term.factors:
        names.setdefault(axes, []).append(name)
    on = lambda axes: tuple(sorted(names.get(axes, ())))  # noqa: E731
    return _Traced(term.coef, (term.wick[0], on((0,))), (term.wick[1], on((1,))), (term.wick[2], on((2,))),
                   on((0, 1)), on((0, 2)), on((1, 2)), (0, 1, 2) in names)


@functools.cache
def _traced_terms(powers: Vec, which: str, third: bool, fourth: bool) -> tuple[_Traced, ...]:
    """``_terms`` of a three-neuron slice up to exchanging j and k: equal products merged, one of each
    exchanged pair kept with both coefficients (the caller symmetrises), oriented so that as many as possible
    share their (i, k) side (the covariance), which lets products with the same i and (i, k) sides share one
    matrix product."""
    coefs: Counter = Counter()
    first: dict[tuple, _Traced] = {}
    for term in _terms(powers, which, third, fourth):
        traced = _as_traced(term)
        coefs[traced.key()] += traced.coef
        first.setdefault(traced.key(), traced)
    chosen = []
    done = set()
    for key, traced in first.items():
        if key in done:
            continue
        partner = traced.swapped()
        done |= {key, partner.key()}
        if partner.key() != key:
            if not math.isclose(coefs[key], coefs[partner.key()]):
                raise ValueError(f"the slice is not symmetric in j and k: {key}")
            traced = min((traced, partner), key=lambda t: (t.y != ("S",), t.y, t.v, t.x))
        chosen.append(_Traced(coefs[key] + (coefs[partner.key()] if partner.key() != key else 0.0), traced.f,
                              traced.u, traced.v, traced.x, traced.y, traced.c, traced.kappa3))
    return tuple(chosen)


# ---------------------------------------------------------------------------
# evaluating products of slices
# ---------------------------------------------------------------------------


class Slices:
    """The pre-activation's slices at distinct neurons, by name (``_PAIR_SLICES``, ``_ONE_SLICES``, and A, g,
    their diagonals dA, dg), and the Wick coefficients ``W(k, p) = E_G[d^k ReLU(z)^p]`` per neuron."""

    def __init__(self, wick, arrays: dict, third: bool, fourth: bool) -> None:
        self.wick = wick
        self.arrays = arrays
        self.cumulants = (third, fourth)

    def vector(self, spec, weight=None):
        (k, p), names = spec
        out = self.wick(k, p)
        for name in names:
            out = out * self.arrays[name]
        return out if weight is None else out * weight

    def matrix(self, names):
        return functools.reduce(lambda x, y: x * y, (self.arrays[name] for name in names)) if names else None

    def single(self, powers: Vec, which: str):
        """``E[h^p]`` per neuron."""
        total = 0.0
        for term in _terms(powers, which, *self.cumulants):
            total = total + term.coef * self.vector((term.wick[0], tuple(name for _, name in term.factors)))
        return total

    def pair(self, powers: Vec, which: str):
        """``kappa(h_i^p, h_j^q)`` at i != j, indexed [i, j], zero on the diagonal."""
        total = 0.0
        for term in _terms(powers, which, *self.cumulants):
            names = {0: [], 1: [], (0, 1): []}
            for axes, name in term.factors:
                names[axes[0] if len(axes) == 1 else axes].append(name)
            value = fnp.outer(term.coef * self.vector((term.wick[0], tuple(names[0]))),
                              self.vector((term.wick[1], tuple(names[1]))))
            matrix = self.matrix(names[(0, 1)])
            total = total + (value if matrix is None else value * matrix)
        fnp.fill_diagonal(total, 0.0)
        return total

    def traced(self, parts, kappa3=None):
        """``t_jk = sum over (powers, which, weight, scale) in parts of scale sum_{i != j, k} weight_i
        kappa(h_i^p, h_j, h_k)`` (p the first of powers), j != k: the kappa_3 part of the wanted slices is
        read through ``kappa3(f, x, y) = sum_{i != j, k} f_i x_ij y_ik kappa_ijk`` (x, y None for ones), and
        the products with an (i, j) and an (i, k) side cost one matrix product per distinct i and (i, k) side."""
        shared: dict[tuple, list] = {}
        total = 0.0
        for index, (powers, which, weight, scale) in enumerate(parts):
            for term in _traced_terms(powers, which, *self.cumulants):
                f = self.vector(term.f, weight)
                if term.kappa3:
                    group = shared.setdefault(("k3", term.x, term.y, term.u, term.v, term.c), [0.0])
                    group[0] = group[0] + (scale * term.coef) * f
                elif term.x and term.y:
                    group = shared.setdefault(("xy", index, term.f, term.y, term.v, term.c), [0.0, f])
                    group[0] = group[0] + (scale * term.coef) * self.matrix(term.x) * self.vector(term.u)[None, :]
                else:
                    core = _traced_product((scale * term.coef) * f, self.matrix(term.x), self.matrix(term.y))
                    total = total + self._outer_sides(core, term.u, term.v, term.c)
        for key, group in shared.items():
            if key[0] == "k3":
                _, x, y, u, v, c = key
                total = total + self._outer_sides(kappa3(group[0], self.matrix(x), self.matrix(y)), u, v, c)
            else:
                _, _, _, y, v, c = key
                core = _traced_product(group[1], group[0], self.matrix(y) * self.vector(v)[None, :])
                total = total + self._outer_sides(core, None, None, c)
        total = (total + total.T) / 2.0
        fnp.fill_diagonal(total, 0.0)
        return total

    def _outer_sides(self, core, u, v, c):
        if u is not None:
            core = core * fnp.outer(self.vector(u), self.vector(v))
        matrix = self.matrix(c)
        return core if matrix is None else core * matrix

    def dense(self, powers: Vec, which: str, kappa3=None):
        """``kappa(h_i, h_j, h_k)`` as a dense n^3 array, off the repeated entries (the products read zero
        there); ``kappa3`` the dense all-distinct block of kappa_3."""
        total = 0.0
        for term in _terms(powers, which, *self.cumulants):
            traced = _as_traced(term)
            f, u, v = (fnp.asarray(self.vector(side), dtype=THIRD_DTYPE) for side in (traced.f, traced.u, traced.v))
            value = ((term.coef * f)[:, None, None] * u[None, :, None]) * v[None, None, :]
            for names, shape in ((traced.x, (slice(None), slice(None), None)),
                                 (traced.y, (slice(None), None, slice(None))),
                                 (traced.c, (None, slice(None), slice(None)))):
                if names:
                    value = value * fnp.asarray(self.matrix(names), dtype=THIRD_DTYPE)[shape]
            total = total + (value * kappa3 if traced.kappa3 else value)
        return total


def _traced_product(f, x, y):
    """``sum_{i != j, k} f_i x_ij y_ik`` for j != k (x, y None for ones); the matrix product in THIRD_DTYPE."""
    if x is not None and y is not None:
        core = fnp.asarray(x.T, dtype=THIRD_DTYPE) @ fnp.asarray(f[:, None] * y, dtype=THIRD_DTYPE)
        return core - (f * fnp.diag(x))[:, None] * y - x.T * (f * fnp.diag(y))[None, :]
    if x is not None:
        return (x.T @ f)[:, None] - (f * fnp.diag(x))[:, None] - x.T * f[None, :]
    if y is not None:
        return (y.T @ f)[None, :] - f[:, None] * y - (f * fnp.diag(y))[None, :]
    return fnp.sum(f) - f[:, None] - f[None, :]


# ---------------------------------------------------------------------------
# the nonlinear step
# ---------------------------------------------------------------------------


def _harmonic_levels(n: int) -> tuple[float, float]:
    """(a1, a2) of the projection of degree 4 onto radial index >= 1, ``a1 R L + a2 R^2 L^2`` (Dai and Xu's
    coefficients with c = d - r + n/2 - 1, summed over r = 1, 2)."""
    c1, c2 = (n + 4) / 2, (n + 2) / 2
    return 1 / (4 * c1), 1 / (16 * c1 * (2 - c1)) + 1 / (32 * c2 * (c2 - 1))


def _without_diagonal(matrix):
    out = matrix * 1.0
    fnp.fill_diagonal(out, 0.0)
    return out


def _fourth_slices(core, metric) -> dict:
    """The slices of ``Sym(A x g)`` at distinct neurons: kappa_iiii = A_ii g_ii, kappa_iiij = (A_ii g_ij +
    A_ij g_ii) / 2, kappa_iijj = (A_ii g_jj + A_jj g_ii + 4 A_ij g_ij) / 6, and A, g for the three-neuron ones."""
    da, dg = fnp.diag(core), fnp.diag(metric)
    r = _without_diagonal((da[:, None] * metric + core * dg[:, None]) / 2.0)
    p = _without_diagonal((fnp.outer(da, dg) + fnp.outer(dg, da) + 4.0 * core * metric) / 6.0)
    return {"A": core, "g": metric, "dA": da, "dg": dg, "e": da * dg, "R": r, "Rt": r.T, "P": p}


@dataclass
class _Step:
    """What a nonlinear step hands the next layer: mean, covariance, the fourth cumulant's core and the third
    cumulant (dense, or the new blocks and the scale of the carried factors)."""

    mean: object
    cov: object
    fourth: object
    dense_third: object = None
    blocks: list | None = None
    scale: object = None


class _Layer:
    """One layer's nonlinear step from the pre-activation's mean, covariance and (when carried) third and
    fourth cumulants: ``third`` is ``("dense", T)`` (the whole tensor) or ``("factors", (a, b, c))``, ``fourth``
    the pair ``(W^T A W, W^T W)``."""

    def __init__(self, mu_pre, cov_pre, third, fourth, factored: bool, wick_class, cp_slices) -> None:
        self.factored = factored
        self.which = FACTORED if factored else ALL
        self.n = mu_pre.shape[0]
        self.wick = wick_class(mu_pre, fnp.maximum(fnp.diag(cov_pre), 1e-10))
        arrays = {"S": _without_diagonal(cov_pre)}
        self.third = third
        if third is not None:
            kind, value = third
            if kind == "dense":
                arrays["d"] = fnp.einsum("iii->i", value)
                arrays["Q"] = _without_diagonal(fnp.einsum("iij->ij", value))
                self.distinct = value * _distinct_mask(self.n)
            else:
                arrays["d"], arrays["Q"] = cp_slices(value)
                fnp.fill_diagonal(arrays["Q"], 0.0)
            arrays["Qt"] = arrays["Q"].T
        if fourth is not None:
            arrays.update(_fourth_slices(*fourth))
        self.slices = Slices(self.wick, arrays, third is not None, fourth is not None)

    def kappa3_traced(self, f, x, y):
        """``sum_{i != j, k} f_i x_ij y_ik kappa_ijk`` of the carried third cumulant."""
        kind, value = self.third
        if kind == "factors":
            if x is not None or y is not None:
                raise ValueError("the factored estimate keeps no product of kappa_ijk with another block")
            return _factored_traced(value, self.slices.arrays["Q"], f)
        weights = fnp.asarray(f[:, None] if x is None else f[:, None] * x, dtype=THIRD_DTYPE)
        tensor = self.distinct if y is None else self.distinct * fnp.asarray(y, dtype=THIRD_DTYPE)[:, None, :]
        return fnp.einsum("ij,ijk->jk", weights, tensor)

    def step(self, carry_third: bool) -> _Step:
        sl, which = self.slices, self.which
        p1, p2, p3, p4 = (sl.single((p,), which) for p in (1, 2, 3, 4))
        p11, p21, p31, p22 = (sl.pair(p, which) for p in ((1, 1), (2, 1), (3, 1), (2, 2)))
        cov = p11 * 1.0
        fnp.fill_diagonal(cov, p2 - p1 * p1)
        k3 = p3 - 3.0 * p2 * p1 + 2.0 * p1 * p1 * p1
        k21 = p21 - 2.0 * p1[:, None] * p11
        k4 = p4 - 4.0 * p3 * p1 - 3.0 * p2 * p2 + 12.0 * p2 * p1 * p1 - 6.0 * p1 * p1 * p1 * p1
        k31 = p31 - 3.0 * p1[:, None] * p21 - 3.0 * p2[:, None] * p11 + 6.0 * (p1 * p1)[:, None] * p11
        k22 = (p22 - 2.0 * p1[None, :] * p21 - 2.0 * p1[:, None] * p21.T - 2.0 * p11 * p11
               + 4.0 * fnp.outer(p1, p1) * p11)
        # sum_i kappa_iijk = sum_i [kappa(h_i^2, h_j, h_k) - 2 E[h_i] kappa_ijk - 2 kappa_ij kappa_ik]
        p11_low = fnp.asarray(p11, dtype=THIRD_DTYPE)
        traced = sl.traced([((2, 1, 1), which, None, 1.0), ((1, 1, 1), which, p1, -2.0)],
                           kappa3=self.kappa3_traced) - 2.0 * (p11_low @ p11_low)
        moment = k31 + k31.T + traced  # M_ab = sum_i kappa_iiab
        fnp.fill_diagonal(moment, k4 + fnp.sum(k22, axis=0))
        a1, a2 = _harmonic_levels(self.n)
        fourth = 12.0 * a1 * moment + (24.0 * a2 * fnp.trace(moment)) * fnp.eye(self.n)
        out = _Step(p1, cov, fourth)
        if carry_third:
            blocks = self._new_blocks(k3, k21)
            if self.factored:
                out.blocks, out.scale = blocks, self.wick(1, 1)
            else:
                out.dense_third = self._dense_third(blocks)
        return out

    def _new_blocks(self, k3, k21):
        """kappa_3 of h, but for the carried part scaled by ``E[H(z)]`` per leg, as blocks ``(X, Y)``, each the
        symmetrised ``X_xy Y_zy``: the two-leg paths, the fourth cumulant's (2,1,1) slices, and the
        correction that sets kappa_iii and kappa_iij.

        The paths are the reference's: each leg (the covariance; kappa_iij / 2 either way; kappa_iijj / 4;
        the doubled covariance Sigma^2 / 2) joined at a centre to every leg the cost allows; as every path
        has the light leg on one side, they are one block ``(w1 Sigma, Y)``."""
        w = lambda k: self.wick(k, 1)  # noqa: E731
        arrays = self.slices.arrays
        s, w1 = arrays["S"], w(1)
        heavy = []
        if self.third is not None:
            half = arrays["Q"] / 2.0
            heavy += [(2, 1, half), (1, 2, half.T)]
        if "P" in arrays:
            heavy.append((2, 2, arrays["P"] / 4.0))
        heavy.append((2, 2, s * s / 2.0))
        right = fnp.outer(w(2), w1) * s
        for near, far, leg in heavy:
            right = right + fnp.outer(w(1 + near), w(far)) * leg
        paths = 3.0 * right.T
        for near, far, leg in heavy:
            paths = paths + 3.0 * (w(near)[:, None] * leg) * w(far + 1)[None, :]
        blocks = [(("dense", w1[:, None] * s), ("dense", paths))]
        if "A" in arrays:  # kappa_ijkk's four products (see _block_products), grouped by their Y
            core, metric, w2 = arrays["A"], arrays["g"], w(2)
            blocks += [(("dense", fnp.outer(w2 * arrays["dA"], w1 / 4.0) + w1[:, None] * core * w2[None, :]),
                        ("dense", w1[:, None] * metric)),
                       (("dense", w1[:, None] * core * w1[None, :]), ("outer", w2 * arrays["dg"] / 4.0))]
        on_iii, on_iij = 0.0, 0.0  # what the blocks and the carried part already put on kappa_iii, kappa_iij
        for x, y in blocks:
            x, y = _materialised(x, self.n), _materialised(y, self.n)
            dx, dy = fnp.diag(x), fnp.diag(y)
            on_iii = on_iii + dx * dy
            on_iij = on_iij + (dx[:, None] * y.T + x * y + x.T * dy[:, None]) / 3.0
        if self.third is not None:
            on_iii = on_iii + w1 * w1 * w1 * arrays["d"]
            on_iij = on_iij + (w1 * w1)[:, None] * w1[None, :] * arrays["Q"]
        correction = 3.0 * _without_diagonal(k21 - on_iij).T
        fnp.fill_diagonal(correction, k3 - on_iii)
        return [*blocks, (("dense", correction), ("eye",))]

    def _dense_third(self, blocks):
        """kappa_3 of h as a dense tensor: the blocks and the diagrams that do not factor, symmetrised, plus
        the carried tensor scaled by ``E[H(z)]`` per leg."""
        kept = 0.0
        for x, y in blocks:
            x = fnp.asarray(_materialised(x, self.n), dtype=THIRD_DTYPE)
            y = fnp.asarray(_materialised(y, self.n), dtype=THIRD_DTYPE)
            kept = kept + x[:, :, None] * y.T[None, :, :]
        kept = kept + self.slices.dense((1, 1, 1), DROPPED, None if self.third is None else self.distinct)
        kept = (kept + fnp.transpose(kept, (0, 2, 1)) + fnp.transpose(kept, (1, 0, 2)) + fnp.transpose(kept, (1, 2, 0))
                + fnp.transpose(kept, (2, 0, 1)) + fnp.transpose(kept, (2, 1, 0))) / 6.0
        if self.third is None:
            return kept
        w1 = fnp.asarray(self.wick(1, 1), dtype=THIRD_DTYPE)
        return kept + self.third[1] * ((w1[:, None, None] * w1[None, :, None]) * w1[None, None, :])


def _materialised(form, n: int):
    """A block's factor as an n x n matrix: ``("dense", M)``, ``("outer", v)`` (v 1^T) or ``("eye",)``."""
    if form[0] == "dense":
        return form[1]
    if form[0] == "outer":
        return fnp.outer(form[1], fnp.ones(n))
    return fnp.eye(n)


def _factored_traced(factors, q, f):
    """``sum_{i != j, k} f_i kappa_ijk`` for ``kappa_3 = Sym(sum_r a_r x b_r x c_r)`` with kappa_iij = q: the
    whole contraction ``(Z + Z^T) / 6``, ``Z = (b diag(f a) + a diag(f b)) c^T + a diag(f c) b^T``, less its
    i = j and i = k entries."""
    a, b, c = factors
    low = fnp.asarray(f, dtype=a.dtype)
    fa, fb, fc = low @ a, low @ b, low @ c
    z = (b * fa[None, :] + a * fb[None, :]) @ c.T + (a * fc[None, :]) @ b.T
    repeated = f[:, None] * q
    return (z + z.T) / 6.0 - repeated - repeated.T


def _distinct_mask(n: int):
    """1 where three indices are distinct, else 0."""
    eye = fnp.eye(n, dtype=THIRD_DTYPE)
    return (1.0 - eye[:, :, None] - eye[:, None, :] - eye[None, :, :]) + 2.0 * (eye[:, :, None] * eye[None, :, :])


# ---------------------------------------------------------------------------
# the linear step and the layers
# ---------------------------------------------------------------------------


def _mapped(wt, form):
    """``W^T`` applied to a block's factor, without a matrix product where its form allows one."""
    if form[0] == "eye":
        return wt
    if form[0] == "outer":
        return fnp.outer(wt @ fnp.asarray(form[1], dtype=wt.dtype), fnp.ones(wt.shape[0], dtype=wt.dtype))
    return wt @ fnp.asarray(form[1], dtype=wt.dtype)


def _linear_factored(w, factors, sizes, step: _Step, window: int):
    """kappa_z = kappa_h x_1 W^T x_2 W^T x_3 W^T on each factor: the carried columns of the last ``window - 1``
    generations scaled and mapped, the new blocks mapped (their identity factor becomes W^T)."""
    wt = fnp.asarray(w.T, dtype=THIRD_DTYPE)
    parts = [[_mapped(wt, x) for x, _ in step.blocks], [wt] * len(step.blocks),
             [_mapped(wt, y) for _, y in step.blocks]]
    sizes = [*sizes, wt.shape[0] * len(step.blocks)]
    if factors is not None and window > 1:
        keep = sum(sizes[-window:-1])
        sizes = sizes[-window:]
        scale = fnp.asarray(step.scale, dtype=THIRD_DTYPE)[:, None]
        for part, old in zip(parts, factors, strict=True):
            part.insert(0, wt @ (old[:, -keep:] * scale))
    else:
        sizes = sizes[-1:]
    return tuple(fnp.concatenate(part, axis=1) for part in parts), sizes


def _linear_dense(w, tensor):
    wt = fnp.asarray(w, dtype=THIRD_DTYPE)
    for _ in range(3):
        tensor = fnp.tensordot(tensor, wt, axes=([0], [0]))
    return tensor


def _final_mean(w, mu, cov, third, fourth_core, wick_class):
    """The last layer's mean alone: E[ReLU] and the kappa_iii, kappa_iiii corrections need the diagonals of the
    pre-activation's covariance and cumulants, not the matrices."""
    mu_pre = w.T @ mu
    var_pre = fnp.maximum(fnp.sum((cov @ w) * w, axis=0), 1e-10)
    arrays = {}
    if third is not None:
        kind, value = third
        if kind == "factors":
            a, b, c = value
            arrays["d"] = fnp.sum((a * b) * c, axis=1)
        else:
            wt = fnp.asarray(w, dtype=THIRD_DTYPE)
            half = fnp.tensordot(value, wt, axes=([2], [0]))  # [a, b, i]
            arrays["d"] = fnp.sum(fnp.sum(half * wt[:, None, :], axis=0) * wt, axis=0)
    if fourth_core is not None:
        arrays["e"] = fnp.sum((fourth_core @ w) * w, axis=0) * fnp.sum(w * w, axis=0)
    slices = Slices(wick_class(mu_pre, var_pre), arrays, third is not None, fourth_core is not None)
    return slices.single((1,), ALL)


def predict(mlp, window: int, *, factored: bool, wick_class, cp_slices):
    """Per-layer means of AUGMENT at K = 3; ``window`` is the layers of third-cumulant history carried (the whole
    history, ``depth - 1``, is the reference's estimate). Factored, the last ``window`` generations are kept at
    every layer, as for BASE and SIMPLE; dense, the third cumulant is carried through the last ``window``
    linear steps (one tensor holds every generation, so the oldest cannot be dropped alone).
    ``wick_class`` gives the Gaussian's ``W(k, p)``, ``cp_slices`` kappa_iii and kappa_iij of a factored tensor."""
    width = mlp.width
    depth = len(mlp.weights)
    mu = fnp.zeros(width)
    cov = fnp.eye(width)
    step = None
    factors, sizes = None, []
    rows = []
    for layer, w in enumerate(mlp.weights):
        third = None
        if factored and step is not None and step.blocks is not None:
            factors, sizes = _linear_factored(w, factors, sizes, step, window)
            third = ("factors", factors)
        elif step is not None and step.dense_third is not None:
            third = ("dense", _linear_dense(w, step.dense_third) if layer < depth - 1 else step.dense_third)
        fourth_core = None if step is None else step.fourth
        if layer == depth - 1:
            rows.append(_final_mean(w, mu, cov, third, fourth_core, wick_class))
            break
        fourth = None if fourth_core is None else (w.T @ fourth_core @ w, w.T @ w)
        carry = window > 0 if factored else layer >= depth - 1 - window
        step = _Layer(w.T @ mu, w.T @ cov @ w, third, fourth, factored, wick_class, cp_slices).step(carry)
        mu, cov = step.mean, step.cov
        rows.append(mu)
    return fnp.stack(rows, axis=0)


# ---------------------------------------------------------------------------
# cost model (chosen before anything runs: the window must fit the budget)
# ---------------------------------------------------------------------------


def _matmul(m: int, k: int, n: int) -> int:
    return (2 * k - 1) * m * n


@functools.cache
def _traced_groups(which: str, third: bool, fourth: bool) -> tuple[int, int]:
    """(matrix products, kappa_3 contractions) of one layer's ``Slices.traced`` call."""
    xy, k3 = set(), set()
    for index, powers in enumerate(((2, 1, 1), (1, 1, 1))):
        for t in _traced_terms(powers, which, third, fourth):
            if t.kappa3:
                k3.add((t.x, t.y, t.u, t.v, t.c))
            elif t.x and t.y:
                xy.add((index, t.f, t.y, t.v, t.c))
    return len(xy), len(k3)


#: Upper bounds of the elementwise work, measured with margin: in units of n^2 per layer (the one- and
#: two-neuron slices, the traced products' corrections, the new blocks) for the first layer, a layer with the
#: fourth cumulant, one also holding factors, and the last; n per layer (the Wick coefficients); per factor
#: column, in units of n; per layer
#: holding a dense third cumulant and per dense third cumulant built, (n^3, n^2) coefficients.
FIRST_WORK = 480
FOURTH_WORK = 960
THIRD_WORK = 520
LAST_WORK = 40
VECTOR_WORK = 200
COLUMN_WORK = 10
DENSE_HELD = (20, 420)
DENSE_BUILT = (21, 150)


def generation_columns(width: int, layer: int) -> int:
    """Factor columns the factored estimate adds at a layer: the paths and the correction, and from layer 1
    on (where the fourth cumulant is carried) the two blocks of its (2,1,1) slices."""
    return width * (2 if layer == 0 else 4)


def _layer_flops(n: int, layer: int, depth: int, window: int, factored: bool, sizes: list[int]) -> tuple[int, list]:
    """The bound of one layer (linear and nonlinear step), and the factored generations' sizes after it."""
    square = _matmul(n, n, n)
    last = layer == depth - 1
    third = (window > 0 and layer >= 1) if factored else layer >= depth - window
    fourth = layer >= 1
    cost = VECTOR_WORK * n
    if factored and third:  # map the previous generation's blocks and the carried columns
        previous = generation_columns(n, layer - 1)
        kept = sizes[-(window - 1):] if window > 1 else []
        sizes = [*kept, previous]
        keep, columns = sum(kept), sum(kept) + previous
        cost += (3 if layer == 1 else 6) * square + 3 * _matmul(n, n, keep) + COLUMN_WORK * n * columns
        if not last:  # kappa_iii, kappa_iij and the traced contraction
            cost += 5 * _matmul(n, columns, n) + 3 * _matmul(1, n, columns) + THIRD_WORK * n * n
    if not factored and third:  # the dense linear step (the last layer's diagonal alone), the slices
        held = 3 * _matmul(n * n, n, n) + DENSE_HELD[0] * n**3 + DENSE_HELD[1] * n * n
        cost += held if not last else _matmul(n * n, n, n) + 2 * n**3
    if last:  # the covariance's and the fourth's diagonals, float64
        return cost + 2 * square * (2 if fourth else 1) + LAST_WORK * n * n, sizes
    cost += 2 * 2 * square + (FOURTH_WORK if fourth else FIRST_WORK) * n * n  # w^T cov w in float64
    if fourth:
        cost += 2 * 2 * square + square  # w^T A w in float64, the metric w^T w
    products, contractions = _traced_groups(FACTORED if factored else ALL, third, fourth)
    cost += (products + 1) * square
    if not factored:
        cost += contractions * (n**3 + _matmul(n, n, n))
        if layer >= depth - 1 - window:  # the dense third cumulant of h
            cost += DENSE_BUILT[0] * n**3 + DENSE_BUILT[1] * n * n
    return cost, sizes


def planned_flops(width: int, depth: int, window: int, factored: bool) -> int:
    """An upper bound of the FLOPs flopscope meters for ``predict(mlp, window, factored=...)``: the matrix
    products exactly (float64 ones at the doubled dtype-aware price), the elementwise work bounded."""
    total, sizes = 0, []
    for layer in range(depth):
        cost, sizes = _layer_flops(width, layer, depth, window, factored, sizes)
        total += cost
    return total
