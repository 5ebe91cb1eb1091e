//! The numbers of the QDQ rewrite: symmetric int8 scales, int8 weights (per output
//! channel or per tensor, full or reduced range) and int32 biases. Pure functions, no
//! graph: [`super::rewrite`] places their results.

/// Symmetric int8 scale of a threshold (1 for an all-zero tensor).
pub fn scale_of(threshold: f32) -> f32 {
    if threshold > 0.0 && threshold.is_finite() {
        threshold / 127.0
    } else {
        1.0
    }
}

/// The integer range int8 weights use.
///
/// ONNX Runtime's x86 u8s8 kernels without VNNI (AVX2, AVX-512 before VNNI) add pairs of
/// u8 x s8 products in saturating int16 (`vpmaddubsw`): with full-range weights
/// `255 * 127 * 2` overflows and the results drift (a random tiny DANet: 85% argmax
/// agreement in ORT against 98% in tract, which computes the QDQ graph exactly). Weights
/// in [-63, 63] cannot saturate; ONNX Runtime's own quantiser calls this `reduce_range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightRange {
    /// [-127, 127]: TensorRT, ARM, x86 with VNNI.
    Full,
    /// [-63, 63] (7 bits): x86 without VNNI.
    Reduced,
}

impl WeightRange {
    /// `Reduced` where this CPU's ONNX Runtime kernels would saturate (x86_64 without
    /// AVX-512 VNNI or AVX-VNNI), else `Full`.
    pub fn for_this_cpu() -> Self {
        match segtool_runtime::expert::cpu_has_vnni() {
            true => Self::Full,
            false => Self::Reduced,
        }
    }

    /// The largest quantised magnitude.
    pub fn max(self) -> f32 {
        match self {
            Self::Full => 127.0,
            Self::Reduced => 63.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Reduced => "reduced",
        }
    }

    /// The range [`WeightRange::name`] names.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Full, Self::Reduced]
            .into_iter()
            .find(|r| r.name() == name)
    }
}

/// Symmetric int8 quantisation of weights, per output channel (axis 0) or per tensor, in
/// `range`. Returns the int8 values and the scales (one per channel, or one).
pub fn quantise_weights(
    w: &[f32],
    dims: &[i64],
    per_channel: bool,
    range: WeightRange,
) -> (Vec<i8>, Vec<f32>) {
    let channels = if per_channel && !dims.is_empty() {
        dims[0].max(1) as usize
    } else {
        1
    };
    let per = w.len() / channels.max(1);
    let mut q = Vec::with_capacity(w.len());
    let mut scales = Vec::with_capacity(channels);
    for c in 0..channels {
        let chunk = &w[c * per..(c + 1) * per];
        let max = range.max();
        let s = match chunk.iter().fold(0f32, |m, x| m.max(x.abs())) {
            t if t > 0.0 && t.is_finite() => t / max,
            _ => 1.0,
        };
        scales.push(s);
        q.extend(
            chunk
                .iter()
                .map(|x| (x / s).round_ties_even().clamp(-max, max) as i8),
        );
    }
    (q, scales)
}

/// Int32 bias quantisation: `round(b / (input_scale * weight_scale[c]))`, zero point 0.
/// Returns the values and the scales (one per channel when `weight_scales` has one per
/// channel, else one).
pub fn quantise_bias(b: &[f32], input_scale: f32, weight_scales: &[f32]) -> (Vec<i32>, Vec<f32>) {
    let scales: Vec<f32> = weight_scales.iter().map(|w| input_scale * w).collect();
    let q = b
        .iter()
        .enumerate()
        .map(|(c, &x)| {
            let s = if scales.len() == 1 {
                scales[0]
            } else {
                scales[c]
            };
            let v = if s > 0.0 && s.is_finite() {
                (x as f64 / s as f64).round()
            } else {
                0.0
            };
            v.clamp(i32::MIN as f64, i32::MAX as f64) as i32
        })
        .collect();
    (q, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_quantise_per_channel_and_per_tensor() {
        let w = [1.0, -0.5, 0.25, 0.0, 0.0, 0.0, 2.0, -4.0];
        let (q, s) = quantise_weights(&w, &[4, 2], true, WeightRange::Full);
        assert_eq!(s, vec![1.0 / 127.0, 0.25 / 127.0, 1.0, 4.0 / 127.0]);
        assert_eq!(q, vec![127, -64, 127, 0, 0, 0, 64, -127]);
        let (q, s) = quantise_weights(&w, &[4, 2], false, WeightRange::Full);
        assert_eq!(s, vec![4.0 / 127.0]);
        assert_eq!(q[7], -127);
        assert_eq!(q[0], 32);
        // Reduced range: 7 bits, the same values at half the resolution.
        let (q, s) = quantise_weights(&w, &[4, 2], false, WeightRange::Reduced);
        assert_eq!(s, vec![4.0 / 63.0]);
        assert_eq!((q[0], q[7]), (16, -63));
        assert!(q.iter().all(|v| (-63..=63).contains(v)));
    }

    #[test]
    fn bias_quantises_with_input_times_weight_scale() {
        let (q, s) = quantise_bias(&[0.5, -0.25, 0.0], 0.5, &[0.01, 0.1, 1.0]);
        assert_eq!(s, vec![0.005, 0.05, 0.5]);
        assert_eq!(q, vec![100, -5, 0]);
        let (q, s) = quantise_bias(&[1.0, -1.0], 0.25, &[0.5]);
        assert_eq!((q, s), (vec![8, -8], vec![0.125]));
    }
}
