//! BERT's learning-rate schedule, as transformers' `get_linear_schedule_with_warmup` gives it:
//! a linear rise from 0 over the warm-up steps, then a linear fall to 0 at the last step.

/// The learning rate of optimizer step `step` (counted from 0, as `LambdaR`'s `last_epoch`):
/// `lr · step / warmup` during the warm-up, then `lr · (steps − step) / (steps − warmup)`.
/// With a warm-up, the first step's rate is 0, as in transformers.
pub fn linear_with_warmup(lr: f64, step: usize, warmup: usize, steps: usize) -> f64 {
    let factor = if step < warmup {
        step as f64 / warmup.max(1) as f64
    } else {
        (steps.saturating_sub(step) as f64 / steps.saturating_sub(warmup).max(1) as f64).max(0.0)
    };
    lr * factor
}

#[cfg(test)]
mod tests {
    use super::linear_with_warmup;

    #[test]
    fn rises_then_falls_to_zero() {
        let rates: Vec<f64> = (0..6).map(|s| linear_with_warmup(1.0, s, 2, 6)).collect();
        assert_eq!(rates, [0.0, 0.5, 1.0, 0.75, 0.5, 0.25]);
        assert_eq!(linear_with_warmup(1.0, 0, 0, 4), 1.0);
    }
}
