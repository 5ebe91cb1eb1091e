//! The evaluation protocol's geometry, shared by the training crate's evaluation (tch)
//! and the runtime's accuracy mode (ndarray), so the two place windows identically.

/// DANet's multi-scale list (PyTorch-Encoding's Cityscapes scales, DESIGN.md).
pub const MULTI_SCALES: [f64; 8] = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.2];

/// One crop window: its top-left corner and its extent inside the image (smaller than
/// the crop only where the image itself is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub y: usize,
    pub x: usize,
    pub h: usize,
    pub w: usize,
}

/// Window origins along an axis of `len` pixels: every `stride`, with the last one moved
/// back to end at the edge (mmsegmentation's placement), so every pixel is covered and
/// no window needs padding unless the axis is shorter than the crop.
pub fn window_starts(len: usize, crop: usize, stride: usize) -> Vec<usize> {
    if len <= crop {
        return vec![0];
    }
    let n = (len - crop).div_ceil(stride) + 1;
    (0..n).map(|i| (i * stride).min(len - crop)).collect()
}

/// The windows covering an `h` x `w` image, row by row.
pub fn windows(h: usize, w: usize, crop: usize, stride: usize) -> Vec<Window> {
    let xs = window_starts(w, crop, stride);
    window_starts(h, crop, stride)
        .into_iter()
        .flat_map(|y| {
            xs.iter().map(move |&x| Window {
                y,
                x,
                h: crop.min(h),
                w: crop.min(w),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_window_ends_at_the_edge() {
        assert_eq!(window_starts(100, 32, 21), vec![0, 21, 42, 63, 68]);
        assert_eq!(window_starts(37, 32, 21), vec![0, 5]);
        assert_eq!(window_starts(20, 32, 21), vec![0]);
        assert_eq!(window_starts(11, 4, 3), vec![0, 3, 6, 7]);
        let all = windows(3, 11, 4, 3);
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[3],
            Window {
                y: 0,
                x: 7,
                h: 3,
                w: 4
            }
        );
    }
}
