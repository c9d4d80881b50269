//! The points of the straight path integrated gradients take from the baseline (α = 0) to the
//! input (α = 1), and the weight of each: ∫₀¹ g(α) dα ≈ Σ_k w_k g(α_k).

use serde::Serialize;

/// How the path integral is approximated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// Gauss–Legendre quadrature: exact for a polynomial of degree up to 2n − 1 in α, the
    /// default, as in Captum.
    #[default]
    GaussLegendre,
    /// The Riemann midpoint rule: α_k = (k + ½)/n, each weighing 1/n.
    Midpoint,
}

crate::choice!(Rule { GaussLegendre => "gauss-legendre", Midpoint => "midpoint" });

impl Rule {
    /// `n` points (α_k, w_k) on [0, 1], α ascending, the weights summing to 1.
    pub fn points(self, n: usize) -> Vec<(f64, f64)> {
        match self {
            Rule::Midpoint => (0..n).map(|k| ((k as f64 + 0.5) / n as f64, 1.0 / n as f64)).collect(),
            Rule::GaussLegendre => gauss_legendre(n),
        }
    }
}

/// The roots x_i of the Legendre polynomial P_n, found by Newton's method from Tricomi's
/// estimate, with the weights 2 / ((1 − x²) P_n'(x)²), mapped from [−1, 1] to [0, 1].
fn gauss_legendre(n: usize) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(n);
    for i in 0..n {
        let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut derivative = 0.0;
        for _ in 0..100 {
            let (p, dp) = legendre(n, x);
            derivative = dp;
            let step = p / dp;
            x -= step;
            if step.abs() < 1e-16 {
                break;
            }
        }
        let (_, dp) = legendre(n, x);
        derivative = if dp.is_finite() { dp } else { derivative };
        let weight = 2.0 / ((1.0 - x * x) * derivative * derivative);
        points.push(((1.0 + x) / 2.0, weight / 2.0));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// P_n(x) and P_n'(x), by the three-term recurrence.
fn legendre(n: usize, x: f64) -> (f64, f64) {
    let (mut previous, mut p) = (1.0, x);
    if n == 0 {
        return (1.0, 0.0);
    }
    for k in 2..=n {
        let k = k as f64;
        (previous, p) = (p, ((2.0 * k - 1.0) * x * p - (k - 1.0) * previous) / k);
    }
    (p, n as f64 * (x * p - previous) / (x * x - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// n Gauss–Legendre points integrate every power up to 2n − 1 exactly (∫₀¹ αᵈ dα = 1/(d+1)),
    /// and the midpoint rule every power up to 1.
    #[test]
    fn the_rules_integrate_what_they_should_exactly() {
        for n in [1, 2, 3, 7, 8, 50, 300] {
            let points = Rule::GaussLegendre.points(n);
            assert_eq!(points.len(), n);
            assert!(points.windows(2).all(|w| w[0].0 < w[1].0), "ascending, distinct");
            assert!(points.iter().all(|&(a, w)| a > 0.0 && a < 1.0 && w > 0.0));
            for degree in 0..(2 * n).min(40) {
                let got: f64 = points.iter().map(|&(a, w)| w * a.powi(degree as i32)).sum();
                let want = 1.0 / (degree as f64 + 1.0);
                assert!((got - want).abs() < 1e-13, "n {n}, α^{degree}: expected {want}, got {got}");
            }
            let midpoint = Rule::Midpoint.points(n);
            for degree in 0..2 {
                let got: f64 = midpoint.iter().map(|&(a, w)| w * a.powi(degree)).sum();
                assert!((got - 1.0 / (degree as f64 + 1.0)).abs() < 1e-13, "midpoint, n {n}, α^{degree}: {got}");
            }
        }
    }
}
