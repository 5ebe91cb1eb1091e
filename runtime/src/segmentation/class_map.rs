//! [`ClassMap`]: a frame's class per pixel, as narrow as the model allows.
//!
//! A model with at most 256 classes gets `u8` ids (one byte a pixel, what GRAY8 frames,
//! mono8 images and 8-bit PNGs hold); one with more (ADE20K-full has 847) gets `u16`
//! ids, up to 65536 classes. The width follows the model's class count, not the ids a
//! frame happens to hold, so every mask of one model has the same width and a front end
//! can fix its output format (GRAY8 or GRAY16, mono8 or mono16) when the model opens.

use ndarray::{Array2, ArrayView2, Zip};

pub(crate) use segtool_model_spec::MAX_CLASSES;

/// Class per pixel, `(H, W)`: `u8` ids for models of at most 256 classes, `u16` above.
///
/// ```
/// use ndarray::Array2;
/// use segtool_runtime::ClassMap;
/// // A 300-class model's answer: ids above 255 need 16 bits.
/// let ids = Array2::from_shape_fn((2, 3), |(y, x)| (y * 150 + x) as u16);
/// let mask = ClassMap::with_classes(ids.clone(), 300).unwrap();
/// assert_eq!((mask.bits(), mask.dim()), (16, (2, 3)));
/// assert_eq!(mask.get((1, 2)), Some(152));
/// assert!(mask.as_u8().is_none());
/// assert_eq!(mask.to_u16(), ids);
/// // A 21-class model's: one byte a pixel, the same ids.
/// let small = ClassMap::from(Array2::<u8>::from_elem((2, 3), 20));
/// assert_eq!(small.bits(), 8);
/// assert_eq!(small.iter().max(), Some(20));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassMap {
    /// Ids of a model with at most 256 classes.
    U8(Array2<u8>),
    /// Ids of a model with 257 to 65536 classes.
    U16(Array2<u16>),
}

/// A borrowed [`ClassMap`], or a label array of either width: what [`colorize`],
/// [`overlay`] and [`FlickerMeter`](crate::FlickerMeter) read.
///
/// [`colorize`]: crate::colorize
/// [`overlay`]: crate::overlay
#[derive(Clone, Copy, Debug)]
pub enum ClassMapView<'a> {
    /// `u8` ids.
    U8(ArrayView2<'a, u8>),
    /// `u16` ids.
    U16(ArrayView2<'a, u16>),
}

impl ClassMap {
    /// The id width, in bits, of a model with `classes` classes: 8 up to 256, else 16.
    pub fn bits_for(classes: usize) -> u32 {
        if classes <= 256 {
            8
        } else {
            16
        }
    }

    /// `ids` at the width a model of `classes` classes answers in ([`bits_for`](Self::bits_for)).
    /// `None` when an id is not below `classes` or `classes` is over [`MAX_CLASSES`].
    pub fn with_classes(ids: Array2<u16>, classes: usize) -> Option<ClassMap> {
        if classes > MAX_CLASSES || ids.iter().any(|&c| usize::from(c) >= classes) {
            return None;
        }
        Some(Self::narrowed(ids, classes))
    }

    /// [`with_classes`](Self::with_classes) without the range check: ids that do not fit
    /// 8 bits when `classes` is at most 256 are cut to their low byte.
    pub(crate) fn narrowed(ids: Array2<u16>, classes: usize) -> ClassMap {
        if Self::bits_for(classes) == 8 {
            ClassMap::U8(ids.mapv(|c| c as u8))
        } else {
            ClassMap::U16(ids)
        }
    }

    /// A map of `(height, width)` filled with class 0, at the width of `classes` classes.
    pub fn zeros(classes: usize, (height, width): (usize, usize)) -> ClassMap {
        if Self::bits_for(classes) == 8 {
            ClassMap::U8(Array2::zeros((height, width)))
        } else {
            ClassMap::U16(Array2::zeros((height, width)))
        }
    }

    /// `(height, width)`.
    pub fn dim(&self) -> (usize, usize) {
        self.view().dim()
    }

    /// Pixels in the map.
    pub fn len(&self) -> usize {
        let (h, w) = self.dim();
        h * w
    }

    /// Whether the map has no pixel.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bits per id: 8 or 16.
    pub fn bits(&self) -> u32 {
        self.view().bits()
    }

    /// The class at `(y, x)`, `None` outside the map.
    pub fn get(&self, at: (usize, usize)) -> Option<u16> {
        self.view().get(at)
    }

    /// The ids in row-major order, whatever the width.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.view().iter()
    }

    /// The `u8` ids, for a model of at most 256 classes.
    pub fn as_u8(&self) -> Option<ArrayView2<'_, u8>> {
        match self {
            ClassMap::U8(m) => Some(m.view()),
            ClassMap::U16(_) => None,
        }
    }

    /// The `u16` ids, for a model of more than 256 classes.
    pub fn as_u16(&self) -> Option<ArrayView2<'_, u16>> {
        match self {
            ClassMap::U8(_) => None,
            ClassMap::U16(m) => Some(m.view()),
        }
    }

    /// The ids widened to `u16` (a copy).
    pub fn to_u16(&self) -> Array2<u16> {
        self.view().to_u16()
    }

    /// The ids as `u8`, when every one fits (a copy for a `u16` map).
    pub fn to_u8(&self) -> Option<Array2<u8>> {
        match self {
            ClassMap::U8(m) => Some(m.clone()),
            ClassMap::U16(m) => {
                let narrow = m.mapv(|c| u8::try_from(c).unwrap_or(0));
                m.iter().all(|&c| c < 256).then_some(narrow)
            }
        }
    }

    /// Borrows it.
    pub fn view(&self) -> ClassMapView<'_> {
        match self {
            ClassMap::U8(m) => ClassMapView::U8(m.view()),
            ClassMap::U16(m) => ClassMapView::U16(m.view()),
        }
    }

    /// The map at `(height, width)`, nearest neighbour (ids are never blended): see
    /// [`resize_nearest`].
    pub fn resized(&self, height: usize, width: usize) -> ClassMap {
        match self {
            ClassMap::U8(m) => ClassMap::U8(resize_nearest(m.view(), height, width)),
            ClassMap::U16(m) => ClassMap::U16(resize_nearest(m.view(), height, width)),
        }
    }

    /// The ids' bytes in row-major order, little-endian for `u16` (GRAY16_LE, mono16
    /// with `is_bigendian` 0, a 16-bit PNG after a byte swap).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            ClassMap::U8(m) => m.iter().copied().collect(),
            ClassMap::U16(m) => m.iter().flat_map(|c| c.to_le_bytes()).collect(),
        }
    }
}

impl From<Array2<u8>> for ClassMap {
    fn from(ids: Array2<u8>) -> Self {
        ClassMap::U8(ids)
    }
}

impl From<Array2<u16>> for ClassMap {
    fn from(ids: Array2<u16>) -> Self {
        ClassMap::U16(ids)
    }
}

impl From<ClassMap> for Array2<u16> {
    fn from(map: ClassMap) -> Self {
        match map {
            ClassMap::U8(m) => m.mapv(u16::from),
            ClassMap::U16(m) => m,
        }
    }
}

impl<'a> ClassMapView<'a> {
    /// `(height, width)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            ClassMapView::U8(m) => m.dim(),
            ClassMapView::U16(m) => m.dim(),
        }
    }

    /// Bits per id: 8 or 16.
    pub fn bits(&self) -> u32 {
        match self {
            ClassMapView::U8(_) => 8,
            ClassMapView::U16(_) => 16,
        }
    }

    /// The class at `(y, x)`, `None` outside the map.
    pub fn get(&self, at: (usize, usize)) -> Option<u16> {
        match self {
            ClassMapView::U8(m) => m.get(at).map(|&c| u16::from(c)),
            ClassMapView::U16(m) => m.get(at).copied(),
        }
    }

    /// The ids in row-major order, whatever the width.
    pub fn iter(self) -> Box<dyn Iterator<Item = u16> + 'a> {
        match self {
            ClassMapView::U8(m) => Box::new(m.into_iter().map(|&c| u16::from(c))),
            ClassMapView::U16(m) => Box::new(m.into_iter().copied()),
        }
    }

    /// The ids widened to `u16` (a copy).
    pub fn to_u16(&self) -> Array2<u16> {
        match self {
            ClassMapView::U8(m) => m.mapv(u16::from),
            ClassMapView::U16(m) => m.to_owned(),
        }
    }

    /// An owned copy.
    pub fn to_owned(&self) -> ClassMap {
        match self {
            ClassMapView::U8(m) => ClassMap::U8(m.to_owned()),
            ClassMapView::U16(m) => ClassMap::U16(m.to_owned()),
        }
    }

    /// How many pixels hold another id in `other` (same size; any widths).
    pub(crate) fn changed(&self, other: ClassMapView<'_>) -> u64 {
        debug_assert_eq!(self.dim(), other.dim(), "masks of different sizes");
        fn count<T: PartialEq>(a: ArrayView2<T>, b: ArrayView2<T>) -> u64 {
            Zip::from(&a)
                .and(&b)
                .fold(0, |n, x, y| n + u64::from(x != y))
        }
        match (*self, other) {
            (ClassMapView::U8(a), ClassMapView::U8(b)) => count(a, b),
            (ClassMapView::U16(a), ClassMapView::U16(b)) => count(a, b),
            (a, b) => a.iter().zip(b.iter()).filter(|(x, y)| x != y).count() as u64,
        }
    }
}

impl<'a> From<&'a ClassMap> for ClassMapView<'a> {
    fn from(map: &'a ClassMap) -> Self {
        map.view()
    }
}

impl<'a> From<ArrayView2<'a, u8>> for ClassMapView<'a> {
    fn from(ids: ArrayView2<'a, u8>) -> Self {
        ClassMapView::U8(ids)
    }
}

impl<'a> From<ArrayView2<'a, u16>> for ClassMapView<'a> {
    fn from(ids: ArrayView2<'a, u16>) -> Self {
        ClassMapView::U16(ids)
    }
}

impl<'a> From<&'a Array2<u8>> for ClassMapView<'a> {
    fn from(ids: &'a Array2<u8>) -> Self {
        ClassMapView::U8(ids.view())
    }
}

impl<'a> From<&'a Array2<u16>> for ClassMapView<'a> {
    fn from(ids: &'a Array2<u16>) -> Self {
        ClassMapView::U16(ids.view())
    }
}

/// Nearest-neighbour resize of a mask to `(height, width)`, PyTorch `mode="nearest"`
/// convention (source index `floor(dst * src / dst_size)`). Labels are never blended; any
/// id type (`u8`, `u16`, ...) works. [`ClassMap::resized`] does it for either width.
pub fn resize_nearest<T: Copy>(mask: ArrayView2<T>, height: usize, width: usize) -> Array2<T> {
    let (h, w) = mask.dim();
    if (h, w) == (height, width) {
        return mask.to_owned();
    }
    let src =
        |dst: usize, src_len: usize, dst_len: usize| ((dst * src_len) / dst_len).min(src_len - 1);
    let cols: Vec<usize> = (0..width).map(|x| src(x, w, width)).collect();
    let mut out: Vec<T> = Vec::with_capacity(height * width);
    let mut previous: Option<usize> = None;
    for y in 0..height {
        let sy = src(y, h, height);
        if previous == Some(sy) {
            // Upscaling repeats source rows: copy the row just written.
            out.extend_from_within(out.len() - width..);
            continue;
        }
        let row = mask.row(sy);
        out.extend(cols.iter().map(|&x| row[x]));
        previous = Some(sy);
    }
    Array2::from_shape_vec((height, width), out).expect("height x width labels")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::arr2;

    #[test]
    fn width_follows_the_class_count() {
        assert_eq!(ClassMap::bits_for(1), 8);
        assert_eq!(ClassMap::bits_for(256), 8);
        assert_eq!(ClassMap::bits_for(257), 16);
        let ids = arr2(&[[0u16, 255], [3, 4]]);
        assert_eq!(
            ClassMap::with_classes(ids.clone(), 256),
            Some(ClassMap::U8(arr2(&[[0, 255], [3, 4]])))
        );
        assert_eq!(
            ClassMap::with_classes(ids.clone(), 847),
            Some(ClassMap::U16(ids.clone()))
        );
        assert_eq!(
            ClassMap::with_classes(ids.clone(), 255),
            None,
            "255 is not below 255"
        );
        assert_eq!(ClassMap::with_classes(ids, MAX_CLASSES + 1), None);
        assert_eq!(ClassMap::zeros(300, (2, 1)).bits(), 16);
    }

    #[test]
    fn accessors_agree_across_widths() {
        let wide = ClassMap::from(arr2(&[[1u16, 300], [2, 65535]]));
        let narrow = ClassMap::from(arr2(&[[1u8, 200], [2, 3]]));
        assert_eq!(wide.get((0, 1)), Some(300));
        assert_eq!(wide.get((2, 0)), None);
        assert_eq!(wide.iter().collect::<Vec<_>>(), [1, 300, 2, 65535]);
        assert_eq!(wide.to_le_bytes(), [1, 0, 44, 1, 2, 0, 255, 255]);
        assert_eq!(wide.to_u8(), None);
        assert_eq!(narrow.to_u16(), arr2(&[[1u16, 200], [2, 3]]));
        assert_eq!(narrow.to_le_bytes(), [1, 200, 2, 3]);
        assert_eq!(narrow.view().changed(wide.view()), 2);
        assert_eq!(wide.resized(4, 4).get((3, 3)), Some(65535));
        assert_eq!(Array2::<u16>::from(narrow.clone()), narrow.to_u16());
    }
}
