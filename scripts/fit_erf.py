#!/usr/bin/env python3
"""Fits the f64 erf of the fast GELU kernel (crates/bert-core/src/ops/kernels/elementwise.rs)
and prints its coefficients as the kernel's Rust arrays. (issue 40; needs mpmath only, which
comes with sympy and so with torch: `pip install mpmath` otherwise.)

    python scripts/fit_erf.py [--p 9] [--q 7] [--zmax 5]

erf(z) = z · P(z²) / Q(z²) on [-zmax, zmax], P of degree --p and Q of degree --q with Q(0) = 1.
The fit is a linearised least-squares fit at Chebyshev nodes, reweighted by 1 / Q from the
previous round, for 12 rounds (Loeb's iteration), in 50 digits, so that the coefficients are
only rounded once, to f64, at the end. It minimises the absolute error of erf, which is what a
GELU's absolute error inherits (0.5 · x · erf's error). The script prints the largest absolute
error of the f64 coefficients over [-8, 8] (beyond ±zmax, the clamp's error 1 - erf(zmax)),
measured in 50 digits.
"""

from __future__ import annotations

import argparse

import mpmath as mp

mp.mp.dps = 50


def fit(p_degree: int, q_degree: int, zmax: mp.mpf, nodes: int = 400) -> tuple[list, list]:
    # Nodes in s = z² / zmax², in [0, 1], dense at both ends.
    ss = [(1 - mp.cos(mp.pi * (k + mp.mpf(0.5)) / nodes)) / 2 for k in range(nodes)]
    target = [mp.erf(mp.sqrt(s) * zmax) / (mp.sqrt(s) * zmax) for s in ss]
    # The absolute error of erf is z times that of erf(z) / z; a floor keeps z = 0 in the fit.
    weight = [mp.sqrt(s) * zmax + mp.mpf("0.05") for s in ss]
    q_at = [mp.mpf(1)] * nodes
    for _ in range(12):
        rows, rhs = [], []
        for s, f, w, q in zip(ss, target, weight, q_at):
            w = w / q
            rows.append([w * s**i for i in range(p_degree + 1)] + [-w * f * s**j for j in range(1, q_degree + 1)])
            rhs.append(w * f)
        x = mp.qr_solve(mp.matrix(rows), mp.matrix(rhs))[0]
        p = [x[i] for i in range(p_degree + 1)]
        q = [mp.mpf(1)] + [x[p_degree + j] for j in range(1, q_degree + 1)]
        q_at = [sum(c * s**j for j, c in enumerate(q)) for s in ss]
    # The same polynomials in t = z² = s · zmax².
    return ([float(c / zmax ** (2 * i)) for i, c in enumerate(p)], [float(c / zmax ** (2 * i)) for i, c in enumerate(q)])


def erf_f64(z: float, p: list[float], q: list[float], zmax: float) -> mp.mpf:
    """The kernel's formula with the f64 coefficients, evaluated exactly."""
    z = mp.mpf(max(-zmax, min(zmax, z)))
    t = z * z
    pv, qv = mp.mpf(p[-1]), mp.mpf(q[-1])
    for c in p[-2::-1]:
        pv = pv * t + c
    for c in q[-2::-1]:
        qv = qv * t + c
    return z * pv / qv


def rust(name: str, coefficients: list[float]) -> list[str]:
    """A Rust array of the coefficients, highest power first, as the kernel writes them."""
    return [f"const {name}: [f64; {len(coefficients)}] = ["] + [f"    {c!r}," for c in coefficients[::-1]] + ["];"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--p", type=int, default=9)
    ap.add_argument("--q", type=int, default=7)
    ap.add_argument("--zmax", type=float, default=5.0)
    args = ap.parse_args()
    p, q = fit(args.p, args.q, mp.mpf(args.zmax))
    worst, at = mp.mpf(0), 0.0
    for i in range(-8000, 8001):
        z = i / 1000
        e = abs(erf_f64(z, p, q, args.zmax) - mp.erf(z))
        if e > worst:
            worst, at = e, z
    print(f"// largest |error| over [-8, 8] in steps of 1e-3: {mp.nstr(worst, 3)} at {at}")
    print("\n".join(rust("ERF_P", p) + rust("ERF_Q", q)))


if __name__ == "__main__":
    main()
