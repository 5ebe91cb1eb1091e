//! Datasets as (image, mask) pairs: the on-the-fly `shapes` stream and the on-disk
//! layouts users already have.
//!
//! Each on-disk layout lives in its own module and is reached through [`open`] with a
//! [`DatasetKind`]; command lines name one as `KIND:PATH` (see [`DatasetSource`]):
//!
//! * [`folder`]: mmsegmentation's custom layout, `root/images/<split>` + `root/masks/<split>`.
//! * [`cityscapes`]: `leftImg8bit/` + `gtFine/`, labelIds mapped to the 19 train ids.
//! * [`ade20k`]: `ADEChallengeData2016`, labels shifted down by one (0 = ignore).
//! * [`voc`]: PASCAL VOC 2012 and its SBD-augmented variant.
//!
//! Whatever the layout, a [`Sample`]'s mask holds class indices in `0..num_classes` or
//! [`IGNORE_LABEL`](crate::IGNORE_LABEL); any other value is reported when the sample is
//! read, so that a wrong mapping fails loudly instead of training on garbage.

use std::path::{Path, PathBuf};

use image::{GrayImage, RgbImage};

use crate::shapes::{self, ShapesConfig};

pub mod ade20k;
pub mod cityscapes;
mod classes;
pub mod folder;
mod paired;
mod source;
pub mod voc;

pub use classes::ClassesFile;
pub use folder::FolderDataset;
pub use paired::read_mask;
pub use segtool_model_spec::images::{is_image, list_images};
pub use source::{class_info, open, DatasetKind, DatasetSource, OpenedDataset};

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("dataset directory {0} does not exist")]
    MissingDir(PathBuf),
    #[error("dataset file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("no images found in {0}")]
    Empty(PathBuf),
    #[error("image {path} has no mask (expected {mask})")]
    MissingMask { path: PathBuf, mask: PathBuf },
    #[error("cannot read image {path}: {source}")]
    Image {
        path: PathBuf,
        source: image::ImageError,
    },
    #[error(
        "image {path} is too large: {}",
        segtool_model_spec::images::too_large_message(*width, *height, *bytes)
    )]
    TooLarge {
        path: PathBuf,
        width: u32,
        height: u32,
        bytes: u64,
    },
    #[error("cannot decode mask {path}: {source}")]
    Png {
        path: PathBuf,
        source: png::DecodingError,
    },
    #[error("mask {path} is {format}; expected 8-bit grayscale or palette indices")]
    MaskFormat { path: PathBuf, format: String },
    #[error("mask {mask} is {mask_size:?} but its image is {image_size:?}")]
    SizeMismatch {
        mask: PathBuf,
        mask_size: (u32, u32),
        image_size: (u32, u32),
    },
    #[error(
        "mask {path} holds label {value}, but the dataset has {num_classes} classes \
         (valid labels are 0..{num_classes} and 255 = ignore)"
    )]
    LabelOutOfRange {
        path: PathBuf,
        value: u8,
        num_classes: usize,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid classes file {path}: {message}")]
    Classes { path: PathBuf, message: String },
    #[error("dataset folder {0} has neither classes.json nor classes.txt")]
    NoClasses(PathBuf),
    #[error("{kind} has no split {split:?} (expected one of: {expected})")]
    UnknownSplit {
        kind: &'static str,
        split: String,
        expected: &'static str,
    },
    #[error("unknown dataset kind {0:?} (expected one of: {kinds})", kinds = DatasetKind::NAMES.join(", "))]
    UnknownKind(String),
}

pub struct Sample {
    pub image: RgbImage,
    pub mask: GrayImage,
}

/// A finite, indexable segmentation dataset. `Sync` so loaders can read from threads.
pub trait SegDataset: Send + Sync {
    fn len(&self) -> usize;
    fn get(&self, index: usize) -> Result<Sample, DatasetError>;
    /// A stable name for sample `index` (file stem), used for output files.
    fn name(&self, index: usize) -> String;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `count` samples of the `shapes` stream starting at `offset` (train and val splits
/// are disjoint ranges of one stream).
#[derive(Clone, Debug)]
pub struct ShapesDataset {
    pub config: ShapesConfig,
    pub offset: u64,
    pub count: usize,
}

impl SegDataset for ShapesDataset {
    fn len(&self) -> usize {
        self.count
    }

    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        let s = shapes::generate(&self.config, self.offset + index as u64);
        Ok(Sample {
            image: s.image,
            mask: s.mask,
        })
    }

    fn name(&self, index: usize) -> String {
        format!("{:06}", self.offset + index as u64)
    }
}

pub fn read_rgb(path: &Path) -> Result<RgbImage, DatasetError> {
    decode(path).map(|i| i.to_rgb8())
}

/// [`segtool_model_spec::images::decode`] with its errors as [`DatasetError`]s naming `path`.
pub(crate) fn decode(path: &Path) -> Result<image::DynamicImage, DatasetError> {
    segtool_model_spec::images::decode(path).map_err(|e| match e {
        segtool_model_spec::images::DecodeError::Image(source) => DatasetError::Image {
            path: path.into(),
            source,
        },
        segtool_model_spec::images::DecodeError::TooLarge {
            width,
            height,
            bytes,
        } => DatasetError::TooLarge {
            path: path.into(),
            width,
            height,
            bytes,
        },
    })
}

/// Writes `dataset` as `root/images/<split>/*.png` + `root/masks/<split>/*.png`, each file
/// atomically.
pub fn write_split(root: &Path, split: &str, dataset: &dyn SegDataset) -> Result<(), DatasetError> {
    let image_dir = root.join("images").join(split);
    let mask_dir = root.join("masks").join(split);
    for index in 0..dataset.len() {
        let sample = dataset.get(index)?;
        let name = dataset.name(index);
        for (dir, encoded) in [
            (
                &image_dir,
                encode_png(&image::DynamicImage::ImageRgb8(sample.image)),
            ),
            (
                &mask_dir,
                encode_png(&image::DynamicImage::ImageLuma8(sample.mask)),
            ),
        ] {
            let path = dir.join(format!("{name}.png"));
            segtool_model_spec::io::write_atomic_unsynced(&path, &encoded)
                .map_err(|source| DatasetError::Io { path, source })?;
        }
    }
    Ok(())
}

/// Writes `classes.json` for a dataset folder.
pub fn write_classes(root: &Path, classes: &ClassesFile) -> Result<(), DatasetError> {
    let path = root.join("classes.json");
    let json = serde_json::to_vec_pretty(classes).expect("classes serialise");
    segtool_model_spec::io::write_atomic(&path, &json)
        .map_err(|source| DatasetError::Io { path, source })
}

pub fn encode_png(img: &image::DynamicImage) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    img.write_to(&mut buf, image::ImageFormat::Png)
        .expect("PNG encoding to memory");
    buf.into_inner()
}

/// Fixture writers shared by the layout modules' tests.
#[cfg(test)]
pub(crate) mod testutil {
    use std::path::Path;

    /// A `w`x`h` RGB image (content irrelevant) written as PNG or JPEG by extension.
    pub fn write_image(path: &Path, w: u32, h: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::RgbImage::from_pixel(w, h, image::Rgb([90, 120, 150]))
            .save(path)
            .unwrap();
    }

    /// An 8-bit grayscale mask holding `values` row by row.
    pub fn write_gray(path: &Path, w: u32, h: u32, values: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::GrayImage::from_raw(w, h, values.to_vec())
            .unwrap()
            .save(path)
            .unwrap();
    }

    /// A palette-indexed mask, the way VOC ships `SegmentationClass`: 8-bit indices plus
    /// a PLTE chunk whose colours must not leak into the labels.
    pub fn write_indexed(path: &Path, w: u32, h: u32, indices: &[u8], palette: &[[u8; 3]]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        let mut encoder = png::Encoder::new(file, w, h);
        encoder.set_color(png::ColorType::Indexed);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_palette(palette.concat());
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(indices).unwrap();
        writer.finish().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_roundtrip_matches_stream() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let stream = ShapesDataset {
            config: ShapesConfig {
                width: 32,
                height: 24,
                ..Default::default()
            },
            offset: 10,
            count: 3,
        };
        write_split(dir, "val", &stream).unwrap();
        let folder = FolderDataset::open(dir, "val").unwrap();
        assert_eq!(folder.len(), 3);
        for i in 0..3 {
            let (a, b) = (stream.get(i).unwrap(), folder.get(i).unwrap());
            assert_eq!(a.image.as_raw(), b.image.as_raw());
            assert_eq!(a.mask.as_raw(), b.mask.as_raw());
            assert_eq!(stream.name(i), folder.name(i));
        }
        std::fs::write(dir.join("images/val/000010.png"), b"not a png").unwrap();
        let err = folder.get(0).err().unwrap().to_string();
        assert!(err.contains("000010.png"), "{err}");
        assert!(matches!(
            FolderDataset::open(dir, "train"),
            Err(DatasetError::MissingDir(_))
        ));
    }
}
