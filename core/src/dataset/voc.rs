//! PASCAL VOC 2012 and its SBD-augmented variant.
//!
//! VOC (`VOCtrainval_11-May-2012.tar`, root = `VOCdevkit/VOC2012` or `VOCdevkit`):
//! `JPEGImages/<id>.jpg`, `SegmentationClass/<id>.png` (palette-indexed: the pixel
//! values are class indices, the PLTE colours only decoration; 255 = object borders,
//! ignored), split lists `ImageSets/Segmentation/<split>.txt`.
//!
//! VOC-aug (the SBD extra annotations most papers train on): `SegmentationClassAug/<id>.png`
//! as 8-bit gray indices, split lists `ImageSets/SegmentationAug/<split>.txt`, where
//! `train` means `train_aug.txt` (10582 images) since that is what "training on VOC"
//! means in that setting.

use std::path::{Path, PathBuf};

use super::paired::{find_file, read_split_list, require_dirs, Pair, PairedDataset};
use super::{DatasetError, OpenedDataset};

/// The 20 object classes plus background, in label order.
#[rustfmt::skip]
pub const CLASSES: [&str; 21] = [
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
    "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
    "sheep", "sofa", "train", "tvmonitor",
];

/// The VOC colour map for the 21 classes (the colours in `SegmentationClass` PNGs).
pub fn palette() -> Vec<[u8; 3]> {
    segtool_model_spec::palette::default_palette(CLASSES.len())
}

/// `root` itself, or `root/VOC2012` when given the `VOCdevkit` folder.
fn voc_root(root: &Path) -> PathBuf {
    let nested = root.join("VOC2012");
    if nested.is_dir() {
        nested
    } else {
        root.to_path_buf()
    }
}

pub(crate) fn open(root: &Path, split: &str) -> Result<OpenedDataset, DatasetError> {
    let root = voc_root(root);
    let list = root
        .join("ImageSets/Segmentation")
        .join(format!("{split}.txt"));
    build(&root, &list, "SegmentationClass")
}

pub(crate) fn open_aug(root: &Path, split: &str) -> Result<OpenedDataset, DatasetError> {
    let root = voc_root(root);
    let split = match split {
        "train" => "train_aug",
        "trainval" => "trainval_aug",
        other => other,
    };
    let file = format!("{split}.txt");
    // `val` is often only in the plain VOC lists; the aug masks cover those images too.
    let candidates = [
        root.join("ImageSets/SegmentationAug").join(&file),
        root.join("ImageSets/Segmentation").join(&file),
    ];
    let list = candidates
        .iter()
        .find(|p| p.is_file())
        .unwrap_or(&candidates[0]);
    build(&root, list, "SegmentationClassAug")
}

fn build(root: &Path, list: &Path, mask_dir: &str) -> Result<OpenedDataset, DatasetError> {
    let image_dir = root.join("JPEGImages");
    let mask_dir = root.join(mask_dir);
    require_dirs(&[root, &image_dir, &mask_dir])?;
    let pairs = read_split_list(list)?
        .into_iter()
        .map(|name| {
            let image = find_file(&image_dir, &name, &["jpg", "jpeg", "png"])?;
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
        .collect::<Result<_, _>>()?;
    Ok(OpenedDataset {
        dataset: Box::new(PairedDataset {
            pairs,
            num_classes: Some(CLASSES.len()),
        }),
        classes: CLASSES.iter().map(|s| s.to_string()).collect(),
        palette: Some(palette()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{write_gray, write_image, write_indexed};
    use crate::dataset::{open as open_kind, DatasetKind};

    const ID: &str = "2007_000032";

    #[test]
    fn indexed_masks_give_indices() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("VOC2012");
        write_image(&root.join(format!("JPEGImages/{ID}.jpg")), 4, 1);
        // The real VOC PLTE: 256 colours, 255 = [224, 224, 192].
        let plte = segtool_model_spec::palette::default_palette(256);
        let mask = root.join(format!("SegmentationClass/{ID}.png"));
        write_indexed(&mask, 4, 1, &[0, 15, 255, 20], &plte);
        std::fs::create_dir_all(root.join("ImageSets/Segmentation")).unwrap();
        std::fs::write(
            root.join("ImageSets/Segmentation/val.txt"),
            format!("{ID}\n"),
        )
        .unwrap();

        // Given the VOCdevkit folder, not VOC2012 itself.
        let opened = open_kind(DatasetKind::Voc, tmp.path(), "val").unwrap();
        assert_eq!(opened.classes[15], "person");
        assert_eq!(opened.palette.as_ref().unwrap()[15], [192, 128, 128]);
        assert_eq!(opened.dataset.name(0), ID);
        assert_eq!(
            opened.dataset.get(0).unwrap().mask.as_raw(),
            &[0, 15, 255, 20]
        );

        write_indexed(&mask, 4, 1, &[0, 21, 255, 20], &plte);
        match opened.dataset.get(0) {
            Err(DatasetError::LabelOutOfRange {
                path,
                value: 21,
                num_classes: 21,
            }) => assert_eq!(path, mask),
            other => panic!("expected LabelOutOfRange, got {:?}", other.err()),
        }

        let err = open_kind(DatasetKind::Voc, &root, "train").unwrap_err();
        assert!(
            matches!(&err, DatasetError::MissingFile(p) if p.ends_with("Segmentation/train.txt")),
            "{err}"
        );
    }

    #[test]
    fn aug_train_reads_train_aug_list() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_image(&root.join(format!("JPEGImages/{ID}.jpg")), 3, 1);
        write_image(&root.join("JPEGImages/2008_000002.jpg"), 3, 1);
        write_gray(
            &root.join(format!("SegmentationClassAug/{ID}.png")),
            3,
            1,
            &[1, 255, 0],
        );
        write_gray(
            &root.join("SegmentationClassAug/2008_000002.png"),
            3,
            1,
            &[20, 20, 3],
        );
        std::fs::create_dir_all(root.join("ImageSets/SegmentationAug")).unwrap();
        // The DeepLab list flavour: image and mask paths on each line.
        std::fs::write(
            root.join("ImageSets/SegmentationAug/train_aug.txt"),
            format!(
                "/JPEGImages/{ID}.jpg /SegmentationClassAug/{ID}.png\n\
                 /JPEGImages/2008_000002.jpg /SegmentationClassAug/2008_000002.png\n"
            ),
        )
        .unwrap();
        for split in ["train", "train_aug"] {
            let opened = open_kind(DatasetKind::VocAug, root, split).unwrap();
            assert_eq!(opened.classes.len(), 21);
            let ds = &opened.dataset;
            assert_eq!((ds.len(), ds.name(1)), (2, "2008_000002".to_string()));
            assert_eq!(ds.get(0).unwrap().mask.as_raw(), &[1, 255, 0]);
            assert_eq!(ds.get(1).unwrap().mask.as_raw(), &[20, 20, 3]);
        }
        match open_kind(DatasetKind::VocAug, &root.join("missing"), "train") {
            Err(DatasetError::MissingDir(dir)) => assert_eq!(dir, root.join("missing")),
            other => panic!("expected MissingDir, got {:?}", other.err()),
        }
    }
}
