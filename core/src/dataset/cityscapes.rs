//! Cityscapes as downloaded (`leftImg8bit_trainvaltest.zip` + `gtFine_trainvaltest.zip`):
//!
//! * `root/leftImg8bit/<split>/<city>/<name>_leftImg8bit.png`
//! * `root/gtFine/<split>/<city>/<name>_gtFine_labelTrainIds.png` when the user ran
//!   `cityscapesscripts/preparation/createTrainIdLabelImgs.py`, else
//!   `<name>_gtFine_labelIds.png`, mapped here with [`LABEL_ID_TO_TRAIN_ID`]. Mapping
//!   on the fly means nobody has to install the Python scripts just to train.

use std::path::Path;

use super::paired::{require_dirs, Pair, PairedDataset};
use super::{DatasetError, OpenedDataset};

/// The 19 evaluation classes, in train-id order.
#[rustfmt::skip]
pub const CLASSES: [&str; 19] = [
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light",
    "traffic sign", "vegetation", "terrain", "sky", "person", "rider", "car", "truck",
    "bus", "train", "motorcycle", "bicycle",
];

/// The official colours (cityscapesscripts `labels.py`), in train-id order.
#[rustfmt::skip]
pub const PALETTE: [[u8; 3]; 19] = [
    [128, 64, 128], [244, 35, 232], [70, 70, 70], [102, 102, 156], [190, 153, 153],
    [153, 153, 153], [250, 170, 30], [220, 220, 0], [107, 142, 35], [152, 251, 152],
    [70, 130, 180], [220, 20, 60], [255, 0, 0], [0, 0, 142], [0, 0, 70], [0, 60, 100],
    [0, 80, 100], [0, 0, 230], [119, 11, 32],
];

/// labelId -> trainId. Ids with `ignoreInEval` (void, ego vehicle, parking, rail track,
/// guard rail, bridge, tunnel, pole group, caravan, trailer, license plate...) and any
/// value that is not a Cityscapes id at all become 255.
pub static LABEL_ID_TO_TRAIN_ID: [u8; 256] = {
    // (labelId, trainId); 20..=28 are consecutive.
    #[rustfmt::skip]
    const PAIRS: [(u8, u8); 19] = [
        (7, 0), (8, 1), (11, 2), (12, 3), (13, 4), (17, 5), (19, 6), (20, 7), (21, 8),
        (22, 9), (23, 10), (24, 11), (25, 12), (26, 13), (27, 14), (28, 15), (31, 16),
        (32, 17), (33, 18),
    ];
    let mut lut = [crate::IGNORE_LABEL; 256];
    let mut i = 0;
    while i < PAIRS.len() {
        lut[PAIRS[i].0 as usize] = PAIRS[i].1;
        i += 1;
    }
    lut
};

const IMAGE_SUFFIX: &str = "_leftImg8bit.png";

pub(crate) fn open(root: &Path, split: &str) -> Result<OpenedDataset, DatasetError> {
    let image_root = root.join("leftImg8bit").join(split);
    let label_root = root.join("gtFine").join(split);
    require_dirs(&[root, &root.join("leftImg8bit"), &image_root, &label_root])?;
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DatasetError::Io { path, source }
    };

    let mut cities: Vec<_> = std::fs::read_dir(&image_root)
        .map_err(io_err(&image_root))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    cities.sort();

    let mut pairs = Vec::new();
    for city_dir in cities {
        let mut images: Vec<_> = std::fs::read_dir(&city_dir)
            .map_err(io_err(&city_dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(IMAGE_SUFFIX))
            })
            .collect();
        images.sort();
        let label_dir = label_root.join(city_dir.file_name().unwrap_or_default());
        for image in images {
            let file_name = image.file_name().unwrap().to_string_lossy();
            let name = file_name[..file_name.len() - IMAGE_SUFFIX.len()].to_string();
            let train_ids = label_dir.join(format!("{name}_gtFine_labelTrainIds.png"));
            let label_ids = label_dir.join(format!("{name}_gtFine_labelIds.png"));
            let (mask, lut) = if train_ids.is_file() {
                (train_ids, None)
            } else if label_ids.is_file() {
                (label_ids, Some(&LABEL_ID_TO_TRAIN_ID))
            } else {
                return Err(DatasetError::MissingMask {
                    path: image,
                    mask: label_ids,
                });
            };
            pairs.push(Pair {
                image,
                mask,
                name,
                lut,
            });
        }
    }
    if pairs.is_empty() {
        return Err(DatasetError::Empty(image_root));
    }
    Ok(OpenedDataset {
        dataset: Box::new(PairedDataset {
            pairs,
            num_classes: Some(CLASSES.len()),
        }),
        classes: CLASSES.iter().map(|s| s.to_string()).collect(),
        palette: Some(PALETTE.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{write_gray, write_image};
    use crate::dataset::{open as open_kind, DatasetKind};

    #[test]
    fn lut_matches_design_table() {
        let lut = &LABEL_ID_TO_TRAIN_ID;
        assert_eq!((lut[7], lut[8], lut[11], lut[17], lut[19]), (0, 1, 2, 5, 6));
        assert_eq!((lut[20], lut[26], lut[28]), (7, 13, 15));
        assert_eq!((lut[31], lut[32], lut[33]), (16, 17, 18));
        for void in [0, 1, 6, 9, 10, 14, 15, 16, 18, 29, 30, 34, 254, 255] {
            assert_eq!(lut[void], 255, "labelId {void}");
        }
        assert_eq!(lut.iter().filter(|&&v| v != 255).count(), 19);
    }

    /// Two cities: `aachen` with only labelIds, `bremen` with labelTrainIds (whose
    /// labelIds file holds garbage to prove it is not the one read).
    #[test]
    fn label_ids_and_train_ids() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let img = |city: &str, name: &str| {
            root.join(format!("leftImg8bit/val/{city}/{name}_leftImg8bit.png"))
        };
        let gt = |city: &str, name: &str, kind: &str| {
            root.join(format!("gtFine/val/{city}/{name}_gtFine_{kind}.png"))
        };
        write_image(&img("aachen", "aachen_000000_000019"), 4, 1);
        write_gray(
            &gt("aachen", "aachen_000000_000019", "labelIds"),
            4,
            1,
            &[26, 7, 0, 33],
        );
        write_image(&img("bremen", "bremen_000001_000019"), 4, 1);
        write_gray(
            &gt("bremen", "bremen_000001_000019", "labelTrainIds"),
            4,
            1,
            &[13, 255, 0, 18],
        );
        write_gray(
            &gt("bremen", "bremen_000001_000019", "labelIds"),
            4,
            1,
            &[1, 1, 1, 1],
        );

        let opened = open_kind(DatasetKind::Cityscapes, root, "val").unwrap();
        assert_eq!(opened.classes.len(), 19);
        assert_eq!(opened.classes[13], "car");
        assert_eq!(opened.palette.as_ref().unwrap()[13], [0, 0, 142]);
        let ds = opened.dataset;
        assert_eq!(ds.len(), 2);
        assert_eq!(ds.name(0), "aachen_000000_000019");
        assert_eq!(ds.get(0).unwrap().mask.as_raw(), &[13, 0, 255, 18]);
        assert_eq!(ds.get(1).unwrap().mask.as_raw(), &[13, 255, 0, 18]);

        // A trainIds file with a value no mapping produces is caught when read.
        write_gray(
            &gt("bremen", "bremen_000001_000019", "labelTrainIds"),
            4,
            1,
            &[0, 19, 0, 0],
        );
        let err = ds.get(1).err().unwrap();
        assert!(matches!(
            err,
            DatasetError::LabelOutOfRange {
                value: 19,
                num_classes: 19,
                ..
            }
        ));
        assert!(err
            .to_string()
            .contains("bremen_000001_000019_gtFine_labelTrainIds.png"));
    }

    #[test]
    fn missing_parts_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        match open_kind(DatasetKind::Cityscapes, root, "train") {
            Err(DatasetError::MissingDir(dir)) => assert_eq!(dir, root.join("leftImg8bit")),
            other => panic!("expected MissingDir, got {:?}", other.err()),
        }
        write_image(
            &root.join("leftImg8bit/train/ulm/ulm_000000_000019_leftImg8bit.png"),
            2,
            1,
        );
        let err = open_kind(DatasetKind::Cityscapes, root, "train").unwrap_err();
        assert!(err.to_string().contains("gtFine"), "{err}");
        std::fs::create_dir_all(root.join("gtFine/train/ulm")).unwrap();
        let err = open_kind(DatasetKind::Cityscapes, root, "train").unwrap_err();
        assert!(
            err.to_string()
                .contains("ulm_000000_000019_gtFine_labelIds.png"),
            "{err}"
        );
    }
}
