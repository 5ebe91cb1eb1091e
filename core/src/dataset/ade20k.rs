//! ADE20K as the SceneParsing challenge ships it (`ADEChallengeData2016.zip`):
//! `root/images/{training,validation}/*.jpg` and
//! `root/annotations/{training,validation}/*.png`, 8-bit labels where 0 is "other"
//! (ignored) and 1..=150 are the classes, shifted down by one here (mmsegmentation's
//! `reduce_zero_label`).

use std::path::Path;

use super::paired::{require_dirs, stem_of, Pair, PairedDataset};
use super::{list_images, DatasetError, OpenedDataset};

/// The 150 classes of the SceneParsing benchmark, in train-id order (raw label - 1), as
/// listed by mmsegmentation's `ADE20KDataset` (whose `"bed "` has a stray space, trimmed).
#[rustfmt::skip]
pub const CLASSES: [&str; 150] = [
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane",
    "grass", "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant",
    "curtain", "chair", "car", "water", "painting", "sofa", "shelf", "house", "sea",
    "mirror", "rug", "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe",
    "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace",
    "refrigerator", "grandstand", "path", "stairs", "runway", "case", "pool table",
    "pillow", "screen door", "stairway", "river", "bridge", "bookcase", "blind",
    "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove",
    "palm", "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine",
    "hovel", "bus", "towel", "light", "truck", "tower", "chandelier", "awning",
    "streetlight", "booth", "television receiver", "airplane", "dirt track", "apparel",
    "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet", "poster",
    "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything",
    "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag", "minibike",
    "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave", "pot",
    "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen",
    "plate", "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag",
];

/// mmsegmentation's ADE20K colours, so visualisations match what users already know.
#[rustfmt::skip]
pub const PALETTE: [[u8; 3]; 150] = [
    [120, 120, 120], [180, 120, 120], [6, 230, 230], [80, 50, 50], [4, 200, 3],
    [120, 120, 80], [140, 140, 140], [204, 5, 255], [230, 230, 230], [4, 250, 7],
    [224, 5, 255], [235, 255, 7], [150, 5, 61], [120, 120, 70], [8, 255, 51], [255, 6, 82],
    [143, 255, 140], [204, 255, 4], [255, 51, 7], [204, 70, 3], [0, 102, 200],
    [61, 230, 250], [255, 6, 51], [11, 102, 255], [255, 7, 71], [255, 9, 224], [9, 7, 230],
    [220, 220, 220], [255, 9, 92], [112, 9, 255], [8, 255, 214], [7, 255, 224],
    [255, 184, 6], [10, 255, 71], [255, 41, 10], [7, 255, 255], [224, 255, 8],
    [102, 8, 255], [255, 61, 6], [255, 194, 7], [255, 122, 8], [0, 255, 20], [255, 8, 41],
    [255, 5, 153], [6, 51, 255], [235, 12, 255], [160, 150, 20], [0, 163, 255],
    [140, 140, 140], [250, 10, 15], [20, 255, 0], [31, 255, 0], [255, 31, 0], [255, 224, 0],
    [153, 255, 0], [0, 0, 255], [255, 71, 0], [0, 235, 255], [0, 173, 255], [31, 0, 255],
    [11, 200, 200], [255, 82, 0], [0, 255, 245], [0, 61, 255], [0, 255, 112], [0, 255, 133],
    [255, 0, 0], [255, 163, 0], [255, 102, 0], [194, 255, 0], [0, 143, 255], [51, 255, 0],
    [0, 82, 255], [0, 255, 41], [0, 255, 173], [10, 0, 255], [173, 255, 0], [0, 255, 153],
    [255, 92, 0], [255, 0, 255], [255, 0, 245], [255, 0, 102], [255, 173, 0], [255, 0, 20],
    [255, 184, 184], [0, 31, 255], [0, 255, 61], [0, 71, 255], [255, 0, 204], [0, 255, 194],
    [0, 255, 82], [0, 10, 255], [0, 112, 255], [51, 0, 255], [0, 194, 255], [0, 122, 255],
    [0, 255, 163], [255, 153, 0], [0, 255, 10], [255, 112, 0], [143, 255, 0], [82, 0, 255],
    [163, 255, 0], [255, 235, 0], [8, 184, 170], [133, 0, 255], [0, 255, 92], [184, 0, 255],
    [255, 0, 31], [0, 184, 255], [0, 214, 255], [255, 0, 112], [92, 255, 0], [0, 224, 255],
    [112, 224, 255], [70, 184, 160], [163, 0, 255], [153, 0, 255], [71, 255, 0],
    [255, 0, 163], [255, 204, 0], [255, 0, 143], [0, 255, 235], [133, 255, 0],
    [255, 0, 235], [245, 0, 255], [255, 0, 122], [255, 245, 0], [10, 190, 212],
    [214, 255, 0], [0, 204, 255], [20, 0, 255], [255, 255, 0], [0, 153, 255], [0, 41, 255],
    [0, 255, 204], [41, 0, 255], [41, 255, 0], [173, 0, 255], [0, 245, 255], [71, 0, 255],
    [122, 0, 255], [0, 255, 184], [0, 92, 255], [184, 255, 0], [0, 133, 255], [255, 214, 0],
    [25, 194, 194], [102, 255, 0], [92, 0, 255],
];

/// Raw label -> train id: 0 -> 255, L -> L - 1. Raw 255 becomes 254, which the range
/// check then reports: nothing in a valid annotation is above 150.
pub static LABEL_TO_TRAIN_ID: [u8; 256] = {
    let mut lut = [0u8; 256];
    lut[0] = crate::IGNORE_LABEL;
    let mut i = 1;
    while i < 256 {
        lut[i] = (i - 1) as u8;
        i += 1;
    }
    lut
};

/// The on-disk directory of `split`: the challenge's own names or the short ones
/// every other dataset uses.
fn split_dir(split: &str) -> Result<&'static str, DatasetError> {
    match split {
        "train" | "training" => Ok("training"),
        "val" | "validation" => Ok("validation"),
        _ => Err(DatasetError::UnknownSplit {
            kind: "ade20k",
            split: split.into(),
            expected: "train (training), val (validation)",
        }),
    }
}

pub(crate) fn open(root: &Path, split: &str) -> Result<OpenedDataset, DatasetError> {
    let dir = split_dir(split)?;
    // Accept the folder that contains the unzipped archive as well as the archive root.
    let nested = root.join("ADEChallengeData2016");
    let root = if nested.is_dir() {
        nested.as_path()
    } else {
        root
    };
    let image_dir = root.join("images").join(dir);
    let label_dir = root.join("annotations").join(dir);
    require_dirs(&[root, &image_dir, &label_dir])?;
    let images = list_images(&image_dir).map_err(|source| DatasetError::Io {
        path: image_dir.clone(),
        source,
    })?;
    if images.is_empty() {
        return Err(DatasetError::Empty(image_dir));
    }
    let pairs = images
        .into_iter()
        .map(|image| {
            let name = stem_of(&image);
            let mask = label_dir.join(format!("{name}.png"));
            if !mask.is_file() {
                return Err(DatasetError::MissingMask { path: image, mask });
            }
            Ok(Pair {
                image,
                mask,
                name,
                lut: Some(&LABEL_TO_TRAIN_ID),
            })
        })
        .collect::<Result<_, _>>()?;
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

    fn fixture(root: &Path) {
        let name = "ADE_val_00000001";
        write_image(&root.join(format!("images/validation/{name}.jpg")), 4, 1);
        write_gray(
            &root.join(format!("annotations/validation/{name}.png")),
            4,
            1,
            &[1, 0, 150, 13],
        );
    }

    #[test]
    fn labels_shift_down_and_zero_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        for split in ["val", "validation"] {
            let opened = open_kind(DatasetKind::Ade20k, tmp.path(), split).unwrap();
            assert_eq!(
                (opened.classes[0].as_str(), opened.classes[149].as_str()),
                ("wall", "flag")
            );
            assert_eq!(opened.palette.as_ref().unwrap().len(), 150);
            assert_eq!(opened.dataset.name(0), "ADE_val_00000001");
            assert_eq!(
                opened.dataset.get(0).unwrap().mask.as_raw(),
                &[0, 255, 149, 12]
            );
        }
    }

    #[test]
    fn errors_name_split_dir_and_bad_label() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        let err = open_kind(DatasetKind::Ade20k, tmp.path(), "test")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"test\"") && err.contains("validation"),
            "{err}"
        );
        match open_kind(DatasetKind::Ade20k, tmp.path(), "train") {
            Err(DatasetError::MissingDir(dir)) => {
                assert_eq!(dir, tmp.path().join("images/training"))
            }
            other => panic!("expected MissingDir, got {:?}", other.err()),
        }
        let mask = tmp
            .path()
            .join("annotations/validation/ADE_val_00000001.png");
        write_gray(&mask, 4, 1, &[1, 200, 0, 0]);
        let opened = open_kind(DatasetKind::Ade20k, tmp.path(), "val").unwrap();
        match opened.dataset.get(0) {
            Err(DatasetError::LabelOutOfRange {
                path,
                value: 199,
                num_classes: 150,
            }) => {
                assert_eq!(path, mask)
            }
            other => panic!("expected LabelOutOfRange, got {:?}", other.err()),
        }
    }
}
