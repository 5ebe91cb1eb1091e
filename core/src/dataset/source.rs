//! Naming a dataset: `DatasetKind`, the `KIND:PATH` command-line syntax, and [`open`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::{ade20k, cityscapes, folder, voc, ClassesFile, DatasetError, SegDataset};

/// An on-disk dataset layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatasetKind {
    Folder,
    Cityscapes,
    Ade20k,
    Voc,
    VocAug,
}

impl DatasetKind {
    pub const ALL: [DatasetKind; 5] = [
        DatasetKind::Folder,
        DatasetKind::Cityscapes,
        DatasetKind::Ade20k,
        DatasetKind::Voc,
        DatasetKind::VocAug,
    ];
    /// The names [`FromStr`] accepts, in the order of [`DatasetKind::ALL`].
    pub const NAMES: [&'static str; 5] = ["folder", "cityscapes", "ade20k", "voc", "voc-aug"];

    pub fn name(self) -> &'static str {
        let index = Self::ALL.iter().position(|&k| k == self).unwrap();
        Self::NAMES[index]
    }
}

impl fmt::Display for DatasetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DatasetKind {
    type Err = DatasetError;

    fn from_str(s: &str) -> Result<Self, DatasetError> {
        let lower = s.to_ascii_lowercase();
        // Accept the spellings people reach for first, not only the canonical names.
        let canonical = match lower.as_str() {
            "ade" | "ade20k" | "adechallengedata2016" => "ade20k",
            "voc" | "voc2012" => "voc",
            "voc-aug" | "vocaug" | "voc_aug" | "sbd" => "voc-aug",
            other => other,
        };
        Self::NAMES
            .iter()
            .position(|&n| n == canonical)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| DatasetError::UnknownKind(s.to_string()))
    }
}

/// A dataset as named on a command line: `shapes` (the built-in stream, which the caller
/// builds since it needs generator options), `KIND:PATH`, or a bare path meaning a
/// [`folder`] dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatasetSource {
    Shapes,
    Disk { kind: DatasetKind, root: PathBuf },
}

impl FromStr for DatasetSource {
    type Err = DatasetError;

    fn from_str(spec: &str) -> Result<Self, DatasetError> {
        if spec == "shapes" {
            return Ok(Self::Shapes);
        }
        let folder = || Self::Disk {
            kind: DatasetKind::Folder,
            root: PathBuf::from(spec),
        };
        let Some((prefix, rest)) = spec.split_once(':') else {
            return Ok(folder());
        };
        if let Ok(kind) = prefix.parse() {
            return Ok(Self::Disk {
                kind,
                root: PathBuf::from(rest),
            });
        }
        // A prefix that looks like a kind name is most likely a typo (`cityscape:/data`);
        // say so rather than report a missing folder called `cityscape:`. One letter is a
        // Windows drive, and an existing path is a path whatever it looks like.
        let looks_like_kind = prefix.len() > 1
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if looks_like_kind && !Path::new(spec).exists() {
            return Err(DatasetError::UnknownKind(prefix.to_string()));
        }
        Ok(folder())
    }
}

/// A dataset opened for one split, with the classes its labels index.
pub struct OpenedDataset {
    pub dataset: Box<dyn SegDataset>,
    /// Class names; empty for a folder without `classes.json`/`classes.txt`, whose
    /// labels are then not range-checked.
    pub classes: Vec<String>,
    pub palette: Option<Vec<[u8; 3]>>,
}

impl fmt::Debug for OpenedDataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenedDataset")
            .field("len", &self.dataset.len())
            .field("classes", &self.classes)
            .field("palette", &self.palette)
            .finish()
    }
}

/// Opens split `split` of the `kind` dataset at `root`. The file list is built and
/// checked here (missing directories and files are errors now, not mid-epoch); images
/// and masks are decoded by [`SegDataset::get`].
pub fn open(kind: DatasetKind, root: &Path, split: &str) -> Result<OpenedDataset, DatasetError> {
    match kind {
        DatasetKind::Folder => folder::open(root, split),
        DatasetKind::Cityscapes => cityscapes::open(root, split),
        DatasetKind::Ade20k => ade20k::open(root, split),
        DatasetKind::Voc => voc::open(root, split),
        DatasetKind::VocAug => voc::open_aug(root, split),
    }
}

/// The classes and palette of the `kind` dataset at `root`, without choosing a split
/// (what training needs to size the model before opening its split). Folders need a
/// classes file here: a model cannot be built without knowing the class count.
pub fn class_info(kind: DatasetKind, root: &Path) -> Result<ClassesFile, DatasetError> {
    let fixed = |classes: &[&str], palette: &[[u8; 3]]| ClassesFile {
        classes: classes.iter().map(|s| s.to_string()).collect(),
        palette: Some(palette.to_vec()),
    };
    Ok(match kind {
        DatasetKind::Folder => {
            ClassesFile::find(root)?.ok_or_else(|| DatasetError::NoClasses(root.into()))?
        }
        DatasetKind::Cityscapes => fixed(&cityscapes::CLASSES, &cityscapes::PALETTE),
        DatasetKind::Ade20k => fixed(&ade20k::CLASSES, &ade20k::PALETTE),
        DatasetKind::Voc | DatasetKind::VocAug => fixed(&voc::CLASSES, &voc::palette()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(kind: DatasetKind, root: &str) -> DatasetSource {
        DatasetSource::Disk {
            kind,
            root: root.into(),
        }
    }

    #[test]
    fn kinds_round_trip_through_names() {
        for kind in DatasetKind::ALL {
            assert_eq!(kind.name().parse::<DatasetKind>().unwrap(), kind);
        }
        assert_eq!(
            "VOC-AUG".parse::<DatasetKind>().unwrap(),
            DatasetKind::VocAug
        );
        let err = "kitti".parse::<DatasetKind>().unwrap_err().to_string();
        assert!(
            err.contains("kitti") && err.contains("cityscapes, ade20k"),
            "{err}"
        );
    }

    #[test]
    fn source_syntax() {
        let parse = |s: &str| s.parse::<DatasetSource>();
        assert_eq!(parse("shapes").unwrap(), DatasetSource::Shapes);
        assert_eq!(
            parse("cityscapes:/data/cityscapes").unwrap(),
            disk(DatasetKind::Cityscapes, "/data/cityscapes")
        );
        assert_eq!(
            parse("voc-aug:rel/VOC2012").unwrap(),
            disk(DatasetKind::VocAug, "rel/VOC2012")
        );
        assert_eq!(
            parse("data/mine").unwrap(),
            disk(DatasetKind::Folder, "data/mine")
        );
        assert_eq!(
            parse("folder:data/mine").unwrap(),
            disk(DatasetKind::Folder, "data/mine")
        );
        assert_eq!(
            parse(r"C:\data").unwrap(),
            disk(DatasetKind::Folder, r"C:\data")
        );
        let err = parse("cityscape:/data").unwrap_err().to_string();
        assert!(
            err.contains("\"cityscape\"") && err.contains("voc-aug"),
            "{err}"
        );
    }

    #[test]
    fn class_info_of_fixed_layouts() {
        let nowhere = Path::new("/nonexistent");
        let city = class_info(DatasetKind::Cityscapes, nowhere).unwrap();
        assert_eq!(city.classes.len(), 19);
        let ade = class_info(DatasetKind::Ade20k, nowhere).unwrap();
        assert_eq!((ade.classes.len(), ade.palette.unwrap().len()), (150, 150));
        let voc = class_info(DatasetKind::VocAug, nowhere).unwrap();
        assert_eq!(voc.classes.len(), 21);
        assert!(matches!(
            class_info(DatasetKind::Folder, nowhere),
            Err(DatasetError::NoClasses(_))
        ));
    }
}
