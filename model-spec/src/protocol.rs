//! The evaluation protocol, once, for the training crate's evaluation (tch) and the
//! runtime's accuracy mode (ndarray): scale sizes, window placement and the way windows,
//! flips and scales are combined. Each side only supplies tensor primitives (a
//! [`Stitch`] backend, see [`stitch`]); [`predict`] is the one implementation of the
//! protocol they both run.
//!
//! Two protocols, which must not be confused:
//! - [`Protocol::Danet`]: DANet's own `MultiEvalModule` (encoding/models/sseg/base.py,
//!   tags v0.5.0 and v1.0.0), which produced the published 79.93 / 81.5. Per scale the
//!   image is resized so that its long side is `ceil(base_size * scale)`; an image whose
//!   long side fits one crop is padded to crop x crop and run once; otherwise windows
//!   start at 0 and step by the stride (`int(crop * 2/3)` by default), the last one cut
//!   at the (crop-padded) image edge and padded back to the crop. Each window's score is
//!   `exp(f(x) + flip(f(flip(x))))` with flip (the reference sums the two logit maps,
//!   then exponentiates), `exp(f(x))` without; overlapping window scores are averaged by
//!   a count map, and the per-scale scores, resized back, are summed.
//!   DANet pads with zero pixels (the normalised value `-mean/std`) and resizes
//!   bilinearly with `align_corners=true`.
//! - [`Protocol::Mmseg`]: mmsegmentation 1.2.2's test pipeline ([`mmseg`]): keep-ratio
//!   resize of the uint8 image (`cv2.resize`, bit-exact: [`resize`]), `whole` or `slide`
//!   (windows every stride, the last one moved back to end at the image edge, never
//!   padded, logits averaged), logits resized back to the image with the model's
//!   `align_corners`; TTA (scales, flip) as `SegTTAModel`: the mean of the variants'
//!   softmax.

mod dispatch;
pub mod mmseg;
mod options;
pub mod antialias;
pub mod resize;
pub mod stitch;

use serde::{Deserialize, Serialize};

pub use options::{ProtocolOptions, Tiling};
pub use dispatch::{predict, predict_images};
pub use stitch::Stitch;

/// DANet's multi-scale list (the paper's Cityscapes scales, DESIGN.md).
pub const MULTI_SCALES: [f64; 8] = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.2];

/// Which evaluation protocol (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// mmsegmentation's test pipeline and TTA (see [`mmseg`]).
    #[default]
    Mmseg,
    /// DANet's `MultiEvalModule`: long side to `base_size * scale`, windows from 0 cut
    /// and padded at the edge, `exp` scores averaged.
    Danet,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Self::Mmseg => "mmseg",
            Self::Danet => "danet",
        }
    }

    /// The sliding window `(crop, stride)` from the flags, where a model's own test config
    /// slides `test` windows (an imported mmseg checkpoint's): an unset crop is the test
    /// crop, else `default_crop`; an unset stride is the test stride for the test crop,
    /// else [`Self::default_stride`].
    pub fn window(
        self,
        crop: Option<usize>,
        stride: Option<usize>,
        test: Option<(usize, usize)>,
        default_crop: usize,
    ) -> (usize, usize) {
        let crop = crop.or(test.map(|t| t.0)).unwrap_or(default_crop);
        let stride = match (stride, test) {
            (Some(stride), _) => stride,
            (None, Some((test_crop, stride))) if crop == test_crop => stride,
            (None, _) => self.default_stride(crop.max(1)),
        };
        (crop, stride)
    }

    /// The default window stride for `crop`: DANet's `int(crop * 2/3)`, mmsegmentation's
    /// (and segtool's historical) 512 capped at the crop.
    pub fn default_stride(self, crop: usize) -> usize {
        match self {
            Self::Danet => (crop * 2 / 3).max(1),
            Self::Mmseg => 512.min(crop),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mmseg" => Ok(Self::Mmseg),
            "danet" => Ok(Self::Danet),
            other => Err(format!("unknown protocol {other:?} (danet, mmseg)")),
        }
    }
}

/// The size an `h` x `w` image is resized to at `scale`.
///
/// mmseg: both sides times the scale, rounded, at least one pixel (segtool's historical
/// approximation; mmseg's own TTA sizes are [`resize::ratio_size`]). DANet: the long side
/// becomes `ceil(base * scale)` and the short side `int(short * long / long_side + 0.5)`,
/// in float64 as the reference computes it (a square image scales its width).
pub fn scaled_size(
    protocol: Protocol,
    h: usize,
    w: usize,
    scale: f64,
    base_size: Option<usize>,
) -> (usize, usize) {
    match protocol {
        Protocol::Mmseg => {
            let side = |len: usize| ((len as f64 * scale).round() as usize).max(1);
            (side(h), side(w))
        }
        Protocol::Danet => {
            let base = base_size.unwrap_or(h.max(w)) as f64;
            let long = ((base * scale).ceil() as usize).max(1);
            let short = |side: usize, long_side: usize| {
                ((side as f64 * long as f64 / long_side as f64 + 0.5) as usize).max(1)
            };
            if h > w {
                (long, short(w, h))
            } else {
                (short(h, w), long)
            }
        }
    }
}

/// One crop window: its top-left corner and its extent inside the image (smaller than
/// the crop where the image, or the edge cut, is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub y: usize,
    pub x: usize,
    pub h: usize,
    pub w: usize,
}

/// mmsegmentation's window origins along an axis of `len` pixels: every `stride`, with
/// the last one moved back to end at the edge, so no window needs padding unless the
/// axis is shorter than the crop.
pub fn window_starts(len: usize, crop: usize, stride: usize) -> Vec<usize> {
    if len <= crop {
        return vec![0];
    }
    let n = (len - crop).div_ceil(stride) + 1;
    (0..n).map(|i| (i * stride).min(len - crop)).collect()
}

/// mmsegmentation's windows covering an `h` x `w` image, row by row.
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

/// DANet's window spans `(start, extent)` along an axis of `len >= crop` pixels:
/// `ceil((len - crop) / stride) + 1` windows at `i * stride`, each cut at the edge.
pub fn danet_spans(len: usize, crop: usize, stride: usize) -> Vec<(usize, usize)> {
    let n = len.saturating_sub(crop).div_ceil(stride) + 1;
    (0..n)
        .map(|i| i * stride)
        .map(|start| (start, crop.min(len - start)))
        .collect()
}

/// DANet's windows over an `h` x `w` image (already padded to at least the crop), row by
/// row.
pub fn danet_windows(h: usize, w: usize, crop: usize, stride: usize) -> Vec<Window> {
    let xs = danet_spans(w, crop, stride);
    danet_spans(h, crop, stride)
        .into_iter()
        .flat_map(|(y, wh)| xs.iter().map(move |&(x, ww)| Window { y, x, h: wh, w: ww }))
        .collect()
}

/// How many of `windows` cover each pixel of an `h` x `w` map, row-major: the divisor that
/// turns summed window scores into a mean.
pub fn window_counts(windows: &[Window], h: usize, w: usize) -> Vec<f32> {
    let mut counts = vec![0f32; h * w];
    for win in windows {
        for y in win.y..win.y + win.h {
            for c in &mut counts[y * w + win.x..y * w + win.x + win.w] {
                *c += 1.0;
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmseg_last_window_ends_at_the_edge() {
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

    #[test]
    fn danet_windows_start_every_stride_and_are_cut_at_the_edge() {
        // Cityscapes at scale 1: 1024 x 2048, crop 768, stride 512.
        assert_eq!(danet_spans(1024, 768, 512), vec![(0, 768), (512, 512)]);
        assert_eq!(
            danet_spans(2048, 768, 512),
            vec![(0, 768), (512, 768), (1024, 768), (1536, 512)]
        );
        assert_eq!(danet_spans(768, 768, 512), vec![(0, 768)]);
        assert_eq!(danet_spans(37, 32, 21), vec![(0, 32), (21, 16)]);
        let all = danet_windows(37, 45, 32, 21);
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[3],
            Window {
                y: 21,
                x: 21,
                h: 16,
                w: 24
            }
        );
        let counts = window_counts(&all, 37, 45);
        assert_eq!(counts[0], 1.0);
        assert_eq!(counts[21 * 45 + 21], 4.0);
        assert!(counts.iter().all(|&c| c >= 1.0));
    }

    #[test]
    fn danet_scales_the_long_side_to_the_base_size() {
        // 1024 x 2048 at base 2048: scale 1 is the image itself, 0.75 gives 768 x 1536.
        assert_eq!(
            scaled_size(Protocol::Danet, 1024, 2048, 1.0, Some(2048)),
            (1024, 2048)
        );
        assert_eq!(
            scaled_size(Protocol::Danet, 1024, 2048, 0.75, Some(2048)),
            (768, 1536)
        );
        // The long side becomes 60, the short int(37 * 60 / 45 + 0.5) = 49.
        assert_eq!(
            scaled_size(Protocol::Danet, 37, 45, 1.0, Some(60)),
            (49, 60)
        );
        assert_eq!(
            scaled_size(Protocol::Danet, 45, 37, 1.0, Some(60)),
            (60, 49)
        );
        // ceil(45 * 0.5) = 23; no base: the image's own long side.
        assert_eq!(scaled_size(Protocol::Danet, 37, 45, 0.5, None), (19, 23));
        assert_eq!(scaled_size(Protocol::Mmseg, 37, 45, 0.5, None), (19, 23));
        assert_eq!(scaled_size(Protocol::Mmseg, 37, 45, 2.0, None), (74, 90));
    }

    #[test]
    fn options_are_validated() {
        let ok = ProtocolOptions {
            protocol: Protocol::Danet,
            tiling: Tiling::Sliding {
                crop: 768,
                stride: 512,
            },
            flip: true,
            scales: vec![1.0],
            base_size: Some(2048),
            resize: None,
            batch_size: 1,
        };
        assert!(ok.validate().is_ok());
        let bad = ProtocolOptions {
            protocol: Protocol::Mmseg,
            ..ok.clone()
        };
        assert!(bad.validate().unwrap_err().contains("danet protocol only"));
        let gaps = ProtocolOptions {
            tiling: Tiling::Sliding {
                crop: 32,
                stride: 40,
            },
            ..ok
        };
        assert!(gaps.validate().is_err());
        assert_eq!(Protocol::Danet.default_stride(768), 512);
        assert_eq!("danet".parse::<Protocol>(), Ok(Protocol::Danet));
    }

    #[test]
    fn mmseg_test_configs_become_options() {
        let slide = crate::MmsegTestCfg {
            scale: [2048, 1024],
            crop: Some(769),
            stride: Some(513),
        };
        let mut spec = crate::ModelSpec::new("m", crate::BackboneSpec::tiny(), vec!["a".into()]);
        assert_eq!(ProtocolOptions::for_model(&spec), ProtocolOptions::new());
        spec.mmseg_test = Some(slide.clone());
        let opts = ProtocolOptions::for_model(&spec);
        assert_eq!(opts.protocol, Protocol::Mmseg);
        assert_eq!(opts.resize, Some([2048, 1024]));
        assert_eq!(
            opts.tiling,
            Tiling::Sliding {
                crop: 769,
                stride: 513
            }
        );
        assert!(opts.validate().is_ok());
        let whole = crate::MmsegTestCfg {
            crop: None,
            stride: None,
            ..slide
        };
        assert_eq!(
            ProtocolOptions::new().mmseg_test(&whole).tiling,
            Tiling::Whole
        );
        // TTA: mmseg's ratios, unflipped then flipped, each a keep-ratio factor of the
        // original image; a single pass uses the test scale.
        let tta = opts.clone().mmseg_tta();
        let sizes = mmseg::variants(1024, 2048, &tta);
        assert_eq!(sizes.len(), 12);
        assert_eq!(sizes[0], (512, 1024, false));
        assert_eq!(sizes[1], (512, 1024, true));
        assert_eq!(sizes[11], (1792, 3584, true));
        assert_eq!(mmseg::variants(512, 1024, &opts), vec![(1024, 2048, false)]);
        assert!(opts.protocol(Protocol::Danet).validate().is_err());
        assert!(ProtocolOptions::new()
            .resize(Some([0, 5]))
            .validate()
            .is_err());
    }
}
