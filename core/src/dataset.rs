//! Datasets as (image, mask) pairs: the on-the-fly `shapes` stream and a folder layout.
//!
//! Folder layout (mmsegmentation's, so existing trees work):
//! `root/images/<split>/<name>.{png,jpg}` and `root/masks/<split>/<name>.png`, masks
//! holding class indices with 255 = ignore; optional `root/classes.json` with
//! `{"classes": [...], "palette": [[r,g,b], ...]}`.

use std::path::{Path, PathBuf};

use image::{GrayImage, RgbImage};
use serde::{Deserialize, Serialize};

use crate::shapes::{self, ShapesConfig};

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("dataset directory {0} does not exist")]
    MissingDir(PathBuf),
    #[error("no images found in {0}")]
    Empty(PathBuf),
    #[error("image {path} has no mask (expected {mask})")]
    MissingMask { path: PathBuf, mask: PathBuf },
    #[error("cannot read image {path}: {source}")]
    Image {
        path: PathBuf,
        source: image::ImageError,
    },
    #[error("mask {mask} is {mask_size:?} but its image is {image_size:?}")]
    SizeMismatch {
        mask: PathBuf,
        mask_size: (u32, u32),
        image_size: (u32, u32),
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid classes file {path}: {message}")]
    Classes { path: PathBuf, message: String },
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

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClassesFile {
    pub classes: Vec<String>,
    #[serde(default)]
    pub palette: Option<Vec<[u8; 3]>>,
}

impl ClassesFile {
    pub fn read(path: &Path) -> Result<Self, DatasetError> {
        let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io {
            path: path.into(),
            source,
        })?;
        let file: Self = serde_json::from_str(&text).map_err(|e| DatasetError::Classes {
            path: path.into(),
            message: e.to_string(),
        })?;
        if file.classes.is_empty() {
            return Err(DatasetError::Classes {
                path: path.into(),
                message: "no classes".into(),
            });
        }
        if let Some(p) = &file.palette {
            if p.len() != file.classes.len() {
                let message = format!(
                    "{} classes but {} palette colours",
                    file.classes.len(),
                    p.len()
                );
                return Err(DatasetError::Classes {
                    path: path.into(),
                    message,
                });
            }
        }
        Ok(file)
    }
}

/// Images and masks in `root/images/<split>` and `root/masks/<split>`.
#[derive(Clone, Debug)]
pub struct FolderDataset {
    items: Vec<(PathBuf, PathBuf)>,
}

impl FolderDataset {
    pub fn open(root: &Path, split: &str) -> Result<Self, DatasetError> {
        let image_dir = root.join("images").join(split);
        let mask_dir = root.join("masks").join(split);
        for dir in [root, &image_dir, &mask_dir] {
            if !dir.is_dir() {
                return Err(DatasetError::MissingDir(dir.to_path_buf()));
            }
        }
        let images = list_images(&image_dir).map_err(|source| DatasetError::Io {
            path: image_dir.clone(),
            source,
        })?;
        if images.is_empty() {
            return Err(DatasetError::Empty(image_dir));
        }
        let items = images
            .into_iter()
            .map(|img| {
                let stem = img
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let mask = mask_dir.join(format!("{stem}.png"));
                if mask.is_file() {
                    Ok((img, mask))
                } else {
                    Err(DatasetError::MissingMask { path: img, mask })
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { items })
    }
}

/// The png/jpg files directly in `dir`, sorted by name.
pub fn list_images(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut images: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let ext = p
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_ascii_lowercase();
            matches!(ext.as_str(), "png" | "jpg" | "jpeg")
        })
        .collect();
    images.sort();
    Ok(images)
}

pub fn read_rgb(path: &Path) -> Result<RgbImage, DatasetError> {
    image::open(path)
        .map(|i| i.to_rgb8())
        .map_err(|source| DatasetError::Image {
            path: path.into(),
            source,
        })
}

impl SegDataset for FolderDataset {
    fn len(&self) -> usize {
        self.items.len()
    }

    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        let (img_path, mask_path) = &self.items[index];
        let image = read_rgb(img_path)?;
        let mask = image::open(mask_path)
            .map(|m| m.to_luma8())
            .map_err(|source| DatasetError::Image {
                path: mask_path.clone(),
                source,
            })?;
        if mask.dimensions() != image.dimensions() {
            return Err(DatasetError::SizeMismatch {
                mask: mask_path.clone(),
                mask_size: mask.dimensions(),
                image_size: image.dimensions(),
            });
        }
        Ok(Sample { image, mask })
    }

    fn name(&self, index: usize) -> String {
        self.items[index]
            .0
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    }
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
            crate::io::write_atomic_unsynced(&path, &encoded)
                .map_err(|source| DatasetError::Io { path, source })?;
        }
    }
    Ok(())
}

/// Writes `classes.json` for a dataset folder.
pub fn write_classes(root: &Path, classes: &ClassesFile) -> Result<(), DatasetError> {
    let path = root.join("classes.json");
    let json = serde_json::to_vec_pretty(classes).expect("classes serialise");
    crate::io::write_atomic(&path, &json).map_err(|source| DatasetError::Io { path, source })
}

pub fn encode_png(img: &image::DynamicImage) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    img.write_to(&mut buf, image::ImageFormat::Png)
        .expect("PNG encoding to memory");
    buf.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_roundtrip_matches_stream() {
        let dir = std::env::temp_dir().join(format!("segtool-ds-{}", std::process::id()));
        let stream = ShapesDataset {
            config: ShapesConfig {
                width: 32,
                height: 24,
                ..Default::default()
            },
            offset: 10,
            count: 3,
        };
        write_split(&dir, "val", &stream).unwrap();
        let folder = FolderDataset::open(&dir, "val").unwrap();
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
            FolderDataset::open(&dir, "train"),
            Err(DatasetError::MissingDir(_))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
