//! One module per subcommand.

pub mod bench;
#[cfg(feature = "ort")]
pub mod calibrate;
#[cfg(feature = "ort")]
pub mod compare;
#[cfg(feature = "train")]
pub mod demo;
pub mod doctor;
#[cfg(feature = "train")]
pub mod eval;
pub mod export;
pub mod generate;
#[cfg(feature = "train")]
pub mod import;
pub mod infer;
#[cfg(feature = "train")]
pub mod model_info;
#[cfg(feature = "train")]
pub mod report;
#[cfg(feature = "train")]
pub mod train;

use anyhow::{bail, Context, Result};
use segtool_core::dataset::{DatasetSource, SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;

/// `shapes` (the built-in stream, `split` picks train or val), `KIND:PATH` for a layout
/// users already have (e.g. `cityscapes:/data/cityscapes`, `voc-aug:/data/VOC2012`), or a
/// bare path to a dataset folder.
#[cfg_attr(not(feature = "train"), allow(dead_code))] // datasets feed train/eval/demo
pub fn open_dataset(spec: &str, split: &str, shapes: &ShapesArgs) -> Result<Box<dyn SegDataset>> {
    let (kind, root) = match spec.parse::<DatasetSource>()? {
        DatasetSource::Disk { kind, root } => (kind, root),
        DatasetSource::Shapes => {
            let (offset, count) = match split {
                "train" => (0, shapes.train_count),
                "val" => (1 << 32, shapes.val_count),
                other => bail!("shapes has splits train and val, not {other:?}"),
            };
            return Ok(Box::new(ShapesDataset {
                config: shapes.config(),
                offset,
                count,
            }));
        }
    };
    let opened = segtool_core::dataset::open(kind, &root, split)
        .with_context(|| format!("opening {kind} dataset {} (split {split})", root.display()))?;
    Ok(opened.dataset)
}

/// Options of the built-in `shapes` dataset shared by several commands.
#[derive(clap::Args, Clone, Debug)]
pub struct ShapesArgs {
    /// Side of generated images, in pixels.
    #[arg(long, default_value_t = 96)]
    pub size: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 2000)]
    pub train_count: usize,
    #[arg(long, default_value_t = 200)]
    pub val_count: usize,
}

impl ShapesArgs {
    pub fn config(&self) -> ShapesConfig {
        ShapesConfig {
            width: self.size,
            height: self.size,
            seed: self.seed,
            ..Default::default()
        }
    }
}

/// Class names and palette of a dataset argument: `shapes`' own, a known layout's fixed
/// list, or a folder's `classes.json`/`classes.txt`.
#[cfg_attr(not(feature = "train"), allow(dead_code))]
pub fn dataset_classes(spec: &str) -> Result<(Vec<String>, Option<Vec<[u8; 3]>>)> {
    match spec.parse::<DatasetSource>()? {
        DatasetSource::Shapes => Ok((
            segtool_core::shapes::CLASSES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            None,
        )),
        DatasetSource::Disk { kind, root } => {
            let file = segtool_core::dataset::class_info(kind, &root)?;
            Ok((file.classes, file.palette))
        }
    }
}
