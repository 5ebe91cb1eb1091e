//! The built-in `shapes` dataset's flags, and datasets named on the command line
//! (opened by `segtool_train::datasets`).

use std::path::Path;

use anyhow::{Context, Result};
use segtool_core::dataset::{write_classes, write_split, ClassesFile, ShapesDataset};
use segtool_core::shapes::ShapesConfig;

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
        ShapesConfig::square(self.size, self.seed)
    }
}

#[cfg(feature = "train")]
impl From<&ShapesArgs> for segtool_train::datasets::ShapesOptions {
    fn from(a: &ShapesArgs) -> Self {
        Self {
            size: a.size,
            seed: a.seed,
            train_count: a.train_count,
            val_count: a.val_count,
        }
    }
}

/// `shapes` (the built-in stream, `split` picks train or val), `KIND:PATH` for a layout
/// users already have (e.g. `cityscapes:/data/cityscapes`, `voc-aug:/data/VOC2012`), or a
/// bare path to a dataset folder.
#[cfg(feature = "train")]
pub fn open_dataset(
    spec: &str,
    split: &str,
    shapes: &ShapesArgs,
) -> Result<Box<dyn segtool_core::dataset::SegDataset>> {
    segtool_train::datasets::open_dataset(spec, split, &shapes.into())
}

/// Writes the `shapes` dataset as a folder: `images/<split>`, `masks/<split>` for train
/// and val, and `classes.json`.
pub fn generate_shapes(out: &Path, shapes: &ShapesArgs) -> Result<()> {
    let config = shapes.config();
    for (split, offset, count) in [
        ("train", 0u64, shapes.train_count),
        ("val", 1u64 << 32, shapes.val_count),
    ] {
        let ds = ShapesDataset {
            config: config.clone(),
            offset,
            count,
        };
        write_split(out, split, &ds)
            .with_context(|| format!("writing shapes {split} split to {}", out.display()))?;
    }
    let classes = segtool_core::shapes::CLASSES
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    let palette = Some(segtool_model_spec::palette::default_palette(classes.len()));
    write_classes(out, &ClassesFile { classes, palette })?;
    Ok(())
}
