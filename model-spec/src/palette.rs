//! Class colours. Index 0 is black (background in most datasets); the rest follow the
//! PASCAL VOC bit-interleaving scheme so that palettes agree with what users already see
//! in VOC/mmsegmentation visualisations.

/// The VOC colour map for `n` classes.
pub fn default_palette(n: usize) -> Vec<[u8; 3]> {
    (0..n)
        .map(|label| {
            let (mut r, mut g, mut b) = (0u8, 0u8, 0u8);
            let mut c = label;
            for j in 0..8 {
                r |= ((c & 1) as u8) << (7 - j);
                g |= (((c >> 1) & 1) as u8) << (7 - j);
                b |= (((c >> 2) & 1) as u8) << (7 - j);
                c >>= 3;
            }
            [r, g, b]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn voc_colours() {
        let p = super::default_palette(4);
        assert_eq!(p, vec![[0, 0, 0], [128, 0, 0], [0, 128, 0], [128, 128, 0]]);
    }
}
