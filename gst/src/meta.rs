//! The class-map meta every output buffer of `segtoolseg` carries: a GStreamer custom
//! meta (`gst_meta_register_custom`, GStreamer 1.20+) named [`META_NAME`] whose structure
//! (of the same name) holds
//!
//! | field | type | what |
//! |---|---|---|
//! | `width`, `height` | `guint` | the class map's size: the frame's |
//! | `classes` | `guint` | the model's class count |
//! | `bits` | `guint` | bits per class id: 8 for a model of at most 256 classes, 16 above |
//! | `class-map` | `GBytes` | `width * height` class ids, row-major, no padding: one byte each, or two (`guint16`, native byte order) when `bits` is 16 |
//! | `pixel-counts` | `GstValueArray` of `guint64` | pixels per class id, `classes` entries |
//! | `frame` | `guint64` | the element's frame index (0, 1, ... since the last start or flush) |
//!
//! With the element's `logits` property, the same structure also holds the frame's
//! logits ([`Logits`]), at the size the model outputs them:
//!
//! | field | type | what |
//! |---|---|---|
//! | `logits` | `GBytes` | `classes * logits-height * logits-width` float32 values, native byte order, row-major (class, row, column) |
//! | `logits-height`, `logits-width` | `guint` | their size |
//!
//! The meta has no tags, so elements that copy or transform buffers (`videoconvert`,
//! `tee`, `queue`) keep it. Read it with [`ClassMap::from_buffer`] in Rust, or with
//! `gst_buffer_get_custom_meta(buf, "SegtoolClassMapMeta")` in C (the inline helpers of
//! `include/gstsegtool.h` do that); the plugin registers the meta when it loads, so a
//! reader only needs the element to be in its pipeline.

use gst::glib;
use segtool_runtime::ClassMap as Ids;

/// The custom meta's registered name.
pub const META_NAME: &str = "SegtoolClassMapMeta";

/// Registers the meta (idempotent; the plugin does it when it loads).
pub fn register() {
    if !gst::meta::CustomMeta::is_registered(META_NAME) {
        gst::meta::CustomMeta::register(META_NAME, &[]);
    }
}

/// One frame's segmentation as the meta carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassMap {
    /// Width of the class map (the frame's).
    pub width: u32,
    /// Height of the class map (the frame's).
    pub height: u32,
    /// The model's class count.
    pub classes: u32,
    /// The class ids, `(height, width)`: `u8` for a model of at most 256 classes, `u16`
    /// above.
    pub ids: Ids,
    /// Pixels per class id (`classes` entries; they sum to `width * height`).
    pub pixel_counts: Vec<u64>,
    /// The element's frame index.
    pub frame: u64,
}

impl ClassMap {
    /// Counts the pixels of each class of `ids` (ids at or above `classes` are ignored).
    pub fn new(width: u32, height: u32, classes: u32, ids: Ids, frame: u64) -> Self {
        fn count<T: Copy + Into<usize>>(ids: &ndarray::Array2<T>, counts: &mut [u64]) {
            for &id in ids {
                if let Some(c) = counts.get_mut(id.into()) {
                    *c += 1;
                }
            }
        }
        let mut pixel_counts = vec![0u64; classes as usize];
        match &ids {
            Ids::U8(m) => count(m, &mut pixel_counts),
            Ids::U16(m) => count(m, &mut pixel_counts),
        }
        Self {
            width,
            height,
            classes,
            ids,
            pixel_counts,
            frame,
        }
    }

    /// The class id at column `x`, row `y`.
    pub fn at(&self, x: u32, y: u32) -> Option<u16> {
        self.ids.get((y as usize, x as usize))
    }

    /// The meta's structure.
    pub fn to_structure(&self) -> gst::Structure {
        let counts = gst::Array::new(self.pixel_counts.iter().map(|&c| c.to_send_value()));
        gst::Structure::builder(META_NAME)
            .field("width", self.width)
            .field("height", self.height)
            .field("classes", self.classes)
            .field("bits", self.ids.bits())
            .field("class-map", glib::Bytes::from_owned(self.id_bytes()))
            .field("pixel-counts", counts)
            .field("frame", self.frame)
            .build()
    }

    /// Reads the meta's structure back; `None` when a field is missing or inconsistent.
    pub fn from_structure(s: &gst::StructureRef) -> Option<Self> {
        if s.name() != META_NAME {
            return None;
        }
        let width = s.get::<u32>("width").ok()?;
        let height = s.get::<u32>("height").ok()?;
        let classes = s.get::<u32>("classes").ok()?;
        let bytes = s.get::<glib::Bytes>("class-map").ok()?;
        let shape = (height as usize, width as usize);
        let ids = match s.get::<u32>("bits").ok()? {
            8 => Ids::U8(ndarray::Array2::from_shape_vec(shape, bytes.to_vec()).ok()?),
            16 => {
                let wide = bytes
                    .chunks_exact(2)
                    .map(|b| u16::from_ne_bytes([b[0], b[1]]));
                Ids::U16(ndarray::Array2::from_shape_vec(shape, wide.collect()).ok()?)
            }
            _ => return None,
        };
        let counts = s.get::<gst::Array>("pixel-counts").ok()?;
        let pixel_counts = counts
            .iter()
            .map(|v| v.get::<u64>().ok())
            .collect::<Option<Vec<u64>>>()?;
        let frame = s.get::<u64>("frame").ok()?;
        (pixel_counts.len() == classes as usize).then_some(Self {
            width,
            height,
            classes,
            ids,
            pixel_counts,
            frame,
        })
    }

    /// The ids as the meta's `class-map` holds them (native byte order for 16 bits).
    fn id_bytes(&self) -> Vec<u8> {
        match &self.ids {
            Ids::U8(m) => m.iter().copied().collect(),
            Ids::U16(m) => m.iter().flat_map(|id| id.to_ne_bytes()).collect(),
        }
    }

    /// The class map attached to `buffer` by `segtoolseg`, if any.
    pub fn from_buffer(buffer: &gst::BufferRef) -> Option<Self> {
        let meta = gst::meta::CustomMeta::from_buffer(buffer, META_NAME).ok()?;
        Self::from_structure(meta.structure())
    }

    /// Attaches this class map to `buffer` as the meta.
    pub fn attach(&self, buffer: &mut gst::BufferRef) -> Result<(), glib::BoolError> {
        register();
        let mut meta = gst::meta::CustomMeta::add(buffer, META_NAME)?;
        let s = meta.mut_structure();
        for (name, value) in self.to_structure().iter() {
            s.set_value(name, value.clone());
        }
        Ok(())
    }
}

/// One frame's logits, in the class map's meta when the element's `logits` property is
/// set.
#[derive(Clone, Debug, PartialEq)]
pub struct Logits {
    /// The model's class count.
    pub classes: u32,
    /// The logits' height and width: the model's output size, which may be smaller than
    /// the frame's.
    pub height: u32,
    pub width: u32,
    /// `classes * height * width` values, row-major (class, row, column).
    pub values: Vec<f32>,
}

impl Logits {
    /// From the runtime's `(classes, height, width)` array.
    pub fn new(logits: ndarray::Array3<f32>) -> Self {
        let (classes, height, width) = logits.dim();
        Self {
            classes: classes as u32,
            height: height as u32,
            width: width as u32,
            // `iter` walks the array in logical (row-major) order, whatever its strides.
            values: logits.iter().copied().collect(),
        }
    }

    /// The logits in the meta on `buffer`, if any.
    pub fn from_buffer(buffer: &gst::BufferRef) -> Option<Self> {
        let meta = gst::meta::CustomMeta::from_buffer(buffer, META_NAME).ok()?;
        let s = meta.structure();
        let classes = s.get::<u32>("classes").ok()?;
        let height = s.get::<u32>("logits-height").ok()?;
        let width = s.get::<u32>("logits-width").ok()?;
        let bytes = s.get::<glib::Bytes>("logits").ok()?;
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (values.len() == (classes * height * width) as usize).then_some(Self {
            classes,
            height,
            width,
            values,
        })
    }

    /// Adds these logits to the class map's meta on `buffer` (attached first).
    pub fn attach(&self, buffer: &mut gst::BufferRef) -> Result<(), glib::BoolError> {
        let mut meta = gst::meta::CustomMeta::from_mut_buffer(buffer, META_NAME)?;
        let bytes: Vec<u8> = self.values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let s = meta.mut_structure();
        s.set("logits", glib::Bytes::from_owned(bytes));
        s.set("logits-height", self.height);
        s.set("logits-width", self.width);
        Ok(())
    }
}

use gst::prelude::ToSendValue;
