//! mmsegmentation's custom-dataset layout, so existing trees work unchanged:
//!
//! * `root/images/<split>/<name>.{png,jpg,jpeg}` and `root/masks/<split>/<name>.png`,
//!   masks holding class indices with 255 = ignore (8-bit gray or palette-indexed);
//! * optionally `root/splits/<split>.txt`, one stem per line, which selects the samples
//!   instead of listing `images/<split>`: images are then looked up in `images/<split>/`
//!   when that exists, else directly in `images/` (one flat pool, several lists);
//! * optionally `root/classes.json` (`{"classes": [...], "palette": [[r,g,b], ...]}`) or
//!   `root/classes.txt` (`name` or `name r g b` per line). With one, labels are checked
//!   against the class count.

use std::path::{Path, PathBuf};

use super::paired::{find_file, read_split_list, require_dirs, stem_of, Pair, PairedDataset};
use super::{list_images, ClassesFile, DatasetError, OpenedDataset, Sample, SegDataset};

const IMAGE_EXTS: [&str; 3] = ["png", "jpg", "jpeg"];

/// Images and masks of one split of a dataset folder.
#[derive(Clone, Debug)]
pub struct FolderDataset {
    inner: PairedDataset,
    classes: Option<ClassesFile>,
}

impl FolderDataset {
    pub fn open(root: &Path, split: &str) -> Result<Self, DatasetError> {
        require_dirs(&[root])?;
        let classes = ClassesFile::find(root)?;
        let list = root.join("splits").join(format!("{split}.txt"));
        let pairs = if list.is_file() {
            pairs_from_list(root, split, &list)?
        } else {
            pairs_from_dir(root, split)?
        };
        let num_classes = classes.as_ref().map(|c| c.classes.len());
        Ok(Self {
            inner: PairedDataset { pairs, num_classes },
            classes,
        })
    }

    /// The folder's classes file, if it has one.
    pub fn classes(&self) -> Option<&ClassesFile> {
        self.classes.as_ref()
    }
}

/// `images/<split>` and `masks/<split>` when present, else the flat `images`/`masks`.
fn split_dir(root: &Path, top: &str, split: &str) -> PathBuf {
    let nested = root.join(top).join(split);
    if nested.is_dir() {
        nested
    } else {
        root.join(top)
    }
}

fn pairs_from_list(root: &Path, split: &str, list: &Path) -> Result<Vec<Pair>, DatasetError> {
    let image_dir = split_dir(root, "images", split);
    let mask_dir = split_dir(root, "masks", split);
    require_dirs(&[&image_dir, &mask_dir])?;
    read_split_list(list)?
        .into_iter()
        .map(|name| {
            let image = find_file(&image_dir, &name, &IMAGE_EXTS)?;
            let mask = mask_dir.join(format!("{name}.png"));
            if !mask.is_file() {
                return Err(DatasetError::MissingMask { path: image, mask });
            }
            Ok(Pair {
                image,
                mask,
                name,
                lut: None,
            })
        })
        .collect()
}

fn pairs_from_dir(root: &Path, split: &str) -> Result<Vec<Pair>, DatasetError> {
    let image_dir = root.join("images").join(split);
    let mask_dir = root.join("masks").join(split);
    require_dirs(&[&image_dir, &mask_dir])?;
    let images = list_images(&image_dir).map_err(|source| DatasetError::Io {
        path: image_dir.clone(),
        source,
    })?;
    if images.is_empty() {
        return Err(DatasetError::Empty(image_dir));
    }
    images
        .into_iter()
        .map(|image| {
            let name = stem_of(&image);
            let mask = mask_dir.join(format!("{name}.png"));
            if !mask.is_file() {
                return Err(DatasetError::MissingMask { path: image, mask });
            }
            Ok(Pair {
                image,
                mask,
                name,
                lut: None,
            })
        })
        .collect()
}

impl SegDataset for FolderDataset {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        self.inner.get(index)
    }

    fn name(&self, index: usize) -> String {
        self.inner.name(index)
    }
}

pub(crate) fn open(root: &Path, split: &str) -> Result<OpenedDataset, DatasetError> {
    let dataset = FolderDataset::open(root, split)?;
    let (classes, palette) = match &dataset.classes {
        Some(file) => (file.classes.clone(), file.palette.clone()),
        None => (Vec::new(), None),
    };
    Ok(OpenedDataset {
        dataset: Box::new(dataset),
        classes,
        palette,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{write_gray, write_image, write_indexed};
    use crate::dataset::{open as open_kind, DatasetKind};

    /// A flat pool of three samples, two split lists, and a classes.txt with colours.
    fn fixture(root: &Path) {
        for (name, values) in [("a", [0, 1]), ("b", [2, 255]), ("c", [1, 1])] {
            write_image(&root.join(format!("images/{name}.jpg")), 2, 1);
            write_gray(&root.join(format!("masks/{name}.png")), 2, 1, &values);
        }
        std::fs::create_dir_all(root.join("splits")).unwrap();
        std::fs::write(root.join("splits/train.txt"), "a\nc\n").unwrap();
        std::fs::write(root.join("splits/val.txt"), "b\n\n").unwrap();
        std::fs::write(
            root.join("classes.txt"),
            "background 0 0 0\nroad 128 64 128\ntraffic light 250 170 30\n",
        )
        .unwrap();
    }

    #[test]
    fn split_lists_and_classes_txt() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        let train = open_kind(DatasetKind::Folder, tmp.path(), "train").unwrap();
        assert_eq!(train.classes, ["background", "road", "traffic light"]);
        assert_eq!(train.palette.as_ref().unwrap()[2], [250, 170, 30]);
        let names: Vec<String> = (0..train.dataset.len())
            .map(|i| train.dataset.name(i))
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(train.dataset.get(0).unwrap().mask.as_raw(), &[0, 1]);

        let val = open_kind(DatasetKind::Folder, tmp.path(), "val").unwrap();
        assert_eq!(val.dataset.len(), 1);
        assert_eq!(val.dataset.get(0).unwrap().mask.as_raw(), &[2, 255]);
    }

    #[test]
    fn listed_stem_without_image_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        std::fs::write(tmp.path().join("splits/test.txt"), "a\nzzz\n").unwrap();
        let err = FolderDataset::open(tmp.path(), "test").unwrap_err();
        assert!(err.to_string().contains("zzz.png"), "{err}");
    }

    #[test]
    fn label_beyond_classes_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        write_gray(&tmp.path().join("masks/c.png"), 2, 1, &[1, 3]);
        let ds = FolderDataset::open(tmp.path(), "train").unwrap();
        assert!(ds.get(0).is_ok());
        match ds.get(1) {
            Err(DatasetError::LabelOutOfRange {
                path,
                value: 3,
                num_classes: 3,
            }) => assert!(path.ends_with("masks/c.png")),
            other => panic!("expected LabelOutOfRange, got {:?}", other.err()),
        }
    }

    #[test]
    fn palette_masks_and_missing_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_image(&root.join("images/val/x.png"), 2, 1);
        let palette = segtool_model_spec::palette::default_palette(256);
        write_indexed(&root.join("masks/val/x.png"), 2, 1, &[4, 255], &palette);
        let ds = FolderDataset::open(root, "val").unwrap();
        assert!(ds.classes().is_none());
        assert_eq!(ds.get(0).unwrap().mask.as_raw(), &[4, 255]);

        match FolderDataset::open(root, "train") {
            Err(DatasetError::MissingDir(dir)) => assert_eq!(dir, root.join("images/train")),
            other => panic!("expected MissingDir, got {:?}", other.err()),
        }
        let err = FolderDataset::open(&root.join("nope"), "val").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
