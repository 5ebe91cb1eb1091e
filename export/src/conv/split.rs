//! Convolutions of a deep reduction, split along their input channels (the `tract`
//! target's [`ExportOptions::conv_split_depth`](crate::ExportOptions::conv_split_depth)).
//!
//! `conv(x, W) + b = sum_g conv(x[:, g], W[:, g]) + b`: exact up to float summation order.
//! tract 0.23.9's matrix product does not block its reduction axis, so a conv whose depth
//! `in_ch x k x k` is large (DANet's `head.conv5a` / `head.conv5c`: 2048 x 3 x 3 = 18432)
//! streams its packed panels from memory instead of cache. Measured at 512x512 on 2 cores
//! (ResNet-50 DANet OS8): those two convs took 6.5 s of the model's 10.9 s; split to depth
//! 2304 the model took 5.2 s (to 4608: 6.1 s, to 1152: 5.5 s, to 576: 8.3 s).
//!
//! Accepts a conv whose input channels divide into a power-of-two number of equal groups
//! of depth at most the limit; leaves any other conv whole. Emitted as one `Slice` and one
//! `Conv` per group (the bias on the first) and a `Sum` that keeps the conv's value name.

use super::{Conv2d, Ctx};

/// The number of input-channel groups that brings `c`'s depth to at most `max_depth`
/// (`None`: already within it, or no power-of-two split of its channels gets there).
pub(super) fn groups(c: &Conv2d, max_depth: usize) -> Option<i64> {
    let depth = |groups: i64| (c.in_ch / groups * c.kernel * c.kernel) as usize;
    let mut groups = 1;
    while depth(groups) > max_depth {
        groups *= 2;
        if c.in_ch % groups != 0 {
            return None;
        }
    }
    (groups > 1).then_some(groups)
}

impl Ctx<'_, '_> {
    /// `conv(x)` with weights `w` `[out, in, k, k]` and bias `b`, as `groups` convs over
    /// equal slices of the input channels, summed into the value `conv`.
    pub(super) fn emit_split_conv(
        &mut self,
        x: &str,
        conv: &str,
        c: Conv2d,
        w: &[f32],
        b: &[f32],
        groups: i64,
    ) -> String {
        let slice = c.in_ch / groups;
        let taps = (c.kernel * c.kernel) as usize;
        let (rows, row) = (c.out_ch as usize, c.in_ch as usize * taps);
        let part_conv = Conv2d { in_ch: slice, ..c };
        let axes = self
            .g
            .add_initializer_i64(&format!("{conv}.split_axes"), &[1], &[1]);
        let bias = self.float_init(&format!("{conv}.bias"), &[c.out_ch], b);
        let mut parts = Vec::with_capacity(groups as usize);
        for g in 0..groups {
            let (lo, hi) = (g * slice, (g + 1) * slice);
            let starts = self
                .g
                .add_initializer_i64(&format!("{conv}.split{g}_start"), &[1], &[lo]);
            let ends = self
                .g
                .add_initializer_i64(&format!("{conv}.split{g}_end"), &[1], &[hi]);
            let xg = self.g.add_node(
                "Slice",
                &[x, &starts, &ends, &axes],
                vec![],
                &format!("{conv}.in{g}"),
            );
            let span = lo as usize * taps..hi as usize * taps;
            let wg: Vec<f32> = (0..rows)
                .flat_map(|o| w[o * row..(o + 1) * row][span.clone()].iter().copied())
                .collect();
            let wn = self.float_init(&format!("{conv}.weight{g}"), &part_conv.weight_dims(), &wg);
            let inputs: Vec<&str> = if g == 0 {
                vec![&xg, &wn, &bias]
            } else {
                vec![&xg, &wn]
            };
            let part = self.g.add_node(
                "Conv",
                &inputs,
                part_conv.attrs(),
                &format!("{conv}.part{g}"),
            );
            parts.push(part);
        }
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        self.g.add_node("Sum", &parts, vec![], conv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_reach_the_depth_in_powers_of_two() {
        let head = Conv2d::new(2048, 512, 3).pad(1);
        assert_eq!(groups(&head, 2304), Some(8));
        assert_eq!(groups(&head, 4608), Some(4));
        assert_eq!(groups(&head, 18432), None);
        assert_eq!(groups(&Conv2d::new(512, 512, 3), 2304), Some(2));
        assert_eq!(groups(&Conv2d::new(2048, 512, 1), 2304), None);
        // 3 channels cannot be halved: the stem stays whole whatever the limit.
        assert_eq!(groups(&Conv2d::new(3, 64, 7), 16), None);
        assert_eq!(groups(&Conv2d::new(6, 8, 3), 27), Some(2));
        assert_eq!(groups(&Conv2d::new(6, 8, 3), 20), None);
    }
}
