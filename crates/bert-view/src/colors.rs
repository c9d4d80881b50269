//! The colour scales of `assets/COLORS.md`, which the page (`view.js`) and the pictures share.

/// An sRGB colour.
pub type Rgb = [u8; 3];

/// Probabilities and other non-negative data: ColorBrewer Blues.
pub const SEQUENTIAL: &[(f64, Rgb)] = &[
    (0.0, rgb(0xf7fbff)),
    (0.125, rgb(0xdeebf7)),
    (0.25, rgb(0xc6dbef)),
    (0.375, rgb(0x9ecae1)),
    (0.5, rgb(0x6baed6)),
    (0.625, rgb(0x4292c6)),
    (0.75, rgb(0x2171b5)),
    (0.875, rgb(0x08519c)),
    (1.0, rgb(0x08306b)),
];

/// Signed data, centred at 0: ColorBrewer RdBu reversed (blue < 0 < red).
pub const DIVERGING: &[(f64, Rgb)] = &[
    (0.0, rgb(0x053061)),
    (0.1, rgb(0x2166ac)),
    (0.2, rgb(0x4393c3)),
    (0.3, rgb(0x92c5de)),
    (0.4, rgb(0xd1e5f0)),
    (0.5, rgb(0xf7f7f7)),
    (0.6, rgb(0xfddbc7)),
    (0.7, rgb(0xf4a582)),
    (0.8, rgb(0xd6604d)),
    (0.9, rgb(0xb2182b)),
    (1.0, rgb(0x67001f)),
];

pub const MASKED: Rgb = rgb(0x9e9e9e);
pub const NAN: Rgb = rgb(0xff00ff);
pub const TEXT: Rgb = rgb(0x222222);
pub const PADDING_TEXT: Rgb = rgb(0x9e9e9e);
pub const MARKED: Rgb = rgb(0xd62728);
pub const FRAME: Rgb = rgb(0xbbbbbb);
/// Sentence A and sentence B.
pub const SEGMENTS: [Rgb; 2] = [rgb(0x1f77b4), rgb(0xff7f0e)];
/// One colour per head, cycled.
pub const HEADS: [Rgb; 16] = [
    rgb(0x1f77b4),
    rgb(0xff7f0e),
    rgb(0x2ca02c),
    rgb(0xd62728),
    rgb(0x9467bd),
    rgb(0x8c564b),
    rgb(0xe377c2),
    rgb(0x7f7f7f),
    rgb(0xbcbd22),
    rgb(0x17becf),
    rgb(0x393b79),
    rgb(0x637939),
    rgb(0x8c6d31),
    rgb(0x843c39),
    rgb(0x7b4173),
    rgb(0xe7ba52),
];

const fn rgb(hex: u32) -> Rgb {
    [(hex >> 16) as u8, (hex >> 8) as u8, hex as u8]
}

/// The colour at `t` in [0, 1] (NaN counts as 0): linear in sRGB between the two stops around
/// it, each channel rounded half up.
pub fn colour(stops: &[(f64, Rgb)], t: f64) -> Rgb {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let k = (1..stops.len()).find(|&k| t <= stops[k].0).unwrap_or(stops.len() - 1);
    let ((p0, c0), (p1, c1)) = (stops[k - 1], stops[k]);
    let f = (t - p0) / (p1 - p0);
    std::array::from_fn(|i| (c0[i] as f64 + (c1[i] as f64 - c0[i] as f64) * f + 0.5).floor() as u8)
}

/// `#rrggbb`.
pub fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ends_and_the_middle_are_the_stops() {
        assert_eq!(colour(SEQUENTIAL, 0.0), rgb(0xf7fbff));
        assert_eq!(colour(SEQUENTIAL, 1.0), rgb(0x08306b));
        assert_eq!(colour(DIVERGING, 0.5), rgb(0xf7f7f7));
        assert_eq!(colour(SEQUENTIAL, f64::NAN), rgb(0xf7fbff));
        // Half way between #f7fbff and #deebf7: (247+222)/2 = 234.5 -> 235, ...
        assert_eq!(colour(SEQUENTIAL, 0.0625), [235, 243, 251]);
    }
}
