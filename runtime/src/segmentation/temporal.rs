//! Temporal stability of video masks: how much they flicker ([`FlickerMeter`]) and
//! smoothing logits across frames ([`TemporalSmoother`]).
//!
//! Per-frame segmentation is noisy where the model is unsure: a pixel near a class
//! boundary, or on a texture the model half-recognises, changes class from one frame to
//! the next although the scene did not. The flicker figure is the share of pixels whose
//! class changes between consecutive answered frames (motion in the scene contributes
//! too, so it is a comparison figure: the same sequence with and without smoothing).
//!
//! [`TemporalSmoother`] keeps an exponential moving average of the logits at the model's
//! output resolution, `s_t = w * s_(t-1) + (1 - w) * l_t`, and takes the argmax of `s_t`
//! (resized to the frame like an unsmoothed mask). The weight `w` in `[0, 1)` is the share
//! of history: 0 is no smoothing; 0.6 halves the noise of independent per-frame errors
//! (its standard deviation times `sqrt((1 - w) / (1 + w))`) and lags a moving edge by
//! about `w / (1 - w)` = 1.5 frames. Smoothing needs logits: models exported with
//! `--argmax` give none.

use ndarray::{Array3, ArrayView3, Axis, Zip};

use crate::segmentation::class_map::{ClassMap, ClassMapView};
use crate::segmentation::postprocess::argmax;

/// [`TemporalSmoother::new`] was given a weight outside `[0, 1)`.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("temporal smoothing weight {0} is not in [0, 1) (the share of history; 0 is none)")]
pub struct InvalidWeight(pub f32);

/// Accumulates the flicker of a mask sequence: over every pair of consecutive masks of
/// one size, the changed pixels over the pixels compared. A mask of another size starts
/// a new run (no pair across it).
///
/// ```
/// use ndarray::arr2;
/// use segtool_runtime::FlickerMeter;
/// let mut meter = FlickerMeter::new();
/// meter.observe(&arr2(&[[0u8, 1], [1, 1]])); // a u8 or u16 label array, or a ClassMap
/// meter.observe(&arr2(&[[1u8, 1], [1, 1]])); // one pixel of four changed
/// assert_eq!(meter.flicker(), Some(0.25));
/// ```
#[derive(Clone, Debug, Default)]
pub struct FlickerMeter {
    previous: Option<ClassMap>,
    changed: u64,
    compared: u64,
    pairs: u64,
}

impl FlickerMeter {
    /// An empty meter: no mask seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next mask; returns the share of its pixels that changed since the
    /// previous one (`None` for the first mask or after a size change).
    pub fn observe<'a>(&mut self, mask: impl Into<ClassMapView<'a>>) -> Option<f64> {
        let mask = mask.into();
        let share = match &self.previous {
            Some(prev) if prev.dim() == mask.dim() => {
                let (h, w) = mask.dim();
                let n = (h * w) as u64;
                let changed = prev.view().changed(mask);
                self.changed += changed;
                self.compared += n;
                self.pairs += 1;
                Some(if n == 0 {
                    0.0
                } else {
                    changed as f64 / n as f64
                })
            }
            _ => None,
        };
        match (&mut self.previous, mask) {
            (Some(ClassMap::U8(prev)), ClassMapView::U8(m)) if prev.dim() == m.dim() => {
                prev.assign(&m)
            }
            (Some(ClassMap::U16(prev)), ClassMapView::U16(m)) if prev.dim() == m.dim() => {
                prev.assign(&m)
            }
            (slot, _) => *slot = Some(mask.to_owned()),
        }
        share
    }

    /// Changed pixels over compared pixels, over all pairs so far (`None` before the
    /// first pair).
    pub fn flicker(&self) -> Option<f64> {
        (self.compared > 0).then(|| self.changed as f64 / self.compared as f64)
    }

    /// Pairs of consecutive masks compared.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }

    /// Forgets the previous mask (a cut in the video); the totals stay.
    pub fn break_run(&mut self) {
        self.previous = None;
    }
}

/// Exponential moving average of logits across frames, then argmax; see the
/// [module docs](self).
///
/// ```
/// use ndarray::Array3;
/// use segtool_runtime::TemporalSmoother;
/// let mut smoother = TemporalSmoother::new(0.5).expect("a weight in [0, 1)");
/// // Two classes over a 1x2 image: class 1 leads, then one noisy frame flips pixel 0.
/// let steady = Array3::from_shape_vec((2, 1, 2), vec![0.0, 0.0, 1.0, 1.0]).unwrap();
/// let noisy = Array3::from_shape_vec((2, 1, 2), vec![0.6, 0.0, 0.4, 1.0]).unwrap();
/// smoother.mask(steady.view(), 1, 2);
/// let mask = smoother.mask(noisy.view(), 1, 2);
/// assert_eq!(mask.iter().collect::<Vec<_>>(), [1, 1]); // the flip is smoothed away
/// ```
#[derive(Clone, Debug)]
pub struct TemporalSmoother {
    weight: f32,
    state: Option<Array3<f32>>,
}

impl TemporalSmoother {
    /// `weight`: the share of history in `[0, 1)` (0: no smoothing).
    pub fn new(weight: f32) -> Result<Self, InvalidWeight> {
        if !(0.0..1.0).contains(&weight) {
            return Err(InvalidWeight(weight));
        }
        Ok(Self {
            weight,
            state: None,
        })
    }

    /// The share of history the smoother was made with, in `[0, 1)`.
    pub fn weight(&self) -> f32 {
        self.weight
    }

    /// Forgets the history (a cut in the video, a camera switch).
    pub fn reset(&mut self) {
        self.state = None;
    }

    /// Adds one frame's logits `(classes, h, w)` and returns the smoothed ones. The first
    /// frame, and a frame of another shape than the history, start afresh.
    pub fn update(&mut self, logits: ArrayView3<f32>) -> ArrayView3<'_, f32> {
        let w = self.weight;
        match &mut self.state {
            Some(state) if state.dim() == logits.dim() => {
                Zip::from(&mut *state)
                    .and(&logits)
                    .for_each(|s, &l| *s = w * *s + (1.0 - w) * l);
            }
            slot => *slot = Some(logits.to_owned()),
        }
        self.state.as_ref().expect("set above").view()
    }

    /// [`update`](Self::update), then the class map of the smoothed logits at
    /// `(height, width)` (nearest resize, as unsmoothed masks are made).
    /// `u8` ids up to 256 classes, `u16` above, as [`Segmentation::mask`](crate::Segmentation::mask).
    pub fn mask(&mut self, logits: ArrayView3<f32>, height: usize, width: usize) -> ClassMap {
        let smoothed = self.update(logits);
        argmax(smoothed.insert_axis(Axis(0)))
            .pop()
            .expect("one image")
            .resized(height, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{arr2, Array2, Array3};

    #[test]
    fn flicker_counts_changed_pixels_over_pairs() {
        let mut m = FlickerMeter::new();
        assert_eq!(m.observe(&arr2(&[[0u8, 1], [1, 1]])), None);
        assert_eq!(m.observe(&arr2(&[[0u8, 1], [1, 0]])), Some(0.25));
        // A 16-bit map of the same ids compares by id.
        assert_eq!(m.observe(&arr2(&[[1u16, 0], [0, 1]])), Some(1.0));
        assert_eq!(m.flicker(), Some(5.0 / 8.0));
        assert_eq!(m.pairs(), 2);
        // Another size: no pair across it.
        assert_eq!(m.observe(&arr2(&[[0u8, 1, 2]])), None);
        assert_eq!(m.pairs(), 2);
        // u8 ids then u16 ids of one size: a pair.
        assert_eq!(m.observe(&arr2(&[[0u16, 300, 2]])), Some(1.0 / 3.0));
        assert_eq!(m.observe(&arr2(&[[0u16, 300, 2]])), Some(0.0));
    }

    #[test]
    fn smoother_is_an_ema_and_weight_zero_is_the_identity() {
        let a = Array3::from_shape_vec((2, 1, 1), vec![1.0f32, 0.0]).unwrap();
        let b = Array3::from_shape_vec((2, 1, 1), vec![0.0f32, 1.0]).unwrap();
        let mut s = TemporalSmoother::new(0.6).unwrap();
        assert_eq!(s.mask(a.view(), 1, 1).get((0, 0)), Some(0));
        // 0.6 * 1 + 0.4 * 0 = 0.6 against 0.4: the history still wins.
        let smoothed = s.update(b.view()).to_owned();
        assert!(
            (smoothed[[0, 0, 0]] - 0.6).abs() < 1e-6 && (smoothed[[1, 0, 0]] - 0.4).abs() < 1e-6
        );
        assert_eq!(
            s.mask(b.view(), 2, 3),
            ClassMap::U8(Array2::from_elem((2, 3), 1))
        );
        let mut none = TemporalSmoother::new(0.0).unwrap();
        none.mask(a.view(), 1, 1);
        assert_eq!(none.mask(b.view(), 1, 1).get((0, 0)), Some(1));
        assert!(TemporalSmoother::new(1.0).is_err());
        assert!(TemporalSmoother::new(-0.1).is_err());
        assert!(TemporalSmoother::new(f32::NAN).is_err());
    }
}
