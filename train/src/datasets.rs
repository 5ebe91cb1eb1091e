//! The datasets a run configuration (or a `--data` flag) names: `shapes` (the built-in
//! stream), `KIND:PATH` for a layout users already have (e.g. `cityscapes:/data/cityscapes`,
//! `voc-aug:/data/VOC2012`), or a bare path to a dataset folder.

use anyhow::{bail, Context, Result};
use segtool_core::config::RunConfig;
use segtool_core::dataset::{DatasetSource, SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;

/// The built-in `shapes` dataset's options (image side, seed, split sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapesOptions {
    /// Side of generated images, in pixels.
    pub size: u32,
    pub seed: u64,
    pub train_count: usize,
    pub val_count: usize,
}

impl ShapesOptions {
    /// The `data.shapes_*` keys (and `seed`) of a run configuration.
    pub fn from_run_config(cfg: &RunConfig) -> Self {
        Self {
            size: cfg.data.shapes_size,
            seed: cfg.seed,
            train_count: cfg.data.shapes_train_count,
            val_count: cfg.data.shapes_val_count,
        }
    }

    /// The generator's configuration: square images of `size`.
    pub fn config(&self) -> ShapesConfig {
        ShapesConfig::square(self.size, self.seed)
    }
}

/// Opens split `split` of the dataset `spec` names (`shapes`: `train` or `val`).
pub fn open_dataset(
    spec: &str,
    split: &str,
    shapes: &ShapesOptions,
) -> Result<Box<dyn SegDataset>> {
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

/// Class names and palette of the dataset `spec` names: `shapes`' own, a known layout's
/// fixed list, or a folder's `classes.json`/`classes.txt`.
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
