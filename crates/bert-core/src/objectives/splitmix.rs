//! The random numbers of BERT's masking: SplitMix64, chosen because it is four lines that any
//! language can repeat exactly (`scripts/dump_reference.py` and `scripts/check_dump.py` do), so
//! that a seed gives the same masks everywhere, on every platform and thread count.

/// SplitMix64 (Steele, Lea and Flood, 2014; the seeding generator of Java's SplittableRandom).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

/// What the state moves by at every number: 2^64 over the golden ratio.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The stream of `seed` after its first `taken` numbers: the state moves by the same
    /// constant at every number, so any place in the stream is reached at once.
    #[inline]
    pub fn after(seed: u64, taken: u64) -> SplitMix64 {
        SplitMix64 { state: seed.wrapping_add(taken.wrapping_mul(GAMMA)) }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in [0, 1): the top 53 bits, an f64's precision.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_place_in_the_stream_is_the_place_reached_by_drawing() {
        let mut rng = SplitMix64::new(42);
        let drawn: Vec<u64> = (0..1000).map(|_| rng.next_u64()).collect();
        for taken in [0usize, 1, 2, 3, 500, 999] {
            assert_eq!(SplitMix64::after(42, taken as u64).next_u64(), drawn[taken], "after {taken} numbers");
        }
    }

    #[test]
    fn the_published_sequence() {
        // The first outputs of Vigna's reference splitmix64.c for this seed, as the rand_xoshiro
        // crate's `reference` test lists them.
        let mut rng = SplitMix64::new(1477776061723855037);
        let want = [1985237415132408290u64, 2979275885539914483, 13511426838097143398, 8488337342461049707];
        for (i, &w) in want.iter().enumerate() {
            assert_eq!(rng.next_u64(), w, "output {i}");
        }
    }
}
