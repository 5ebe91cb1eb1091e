//! One module per subcommand.

#[cfg(feature = "train")]
pub mod demo;
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
pub mod train;

use std::path::Path;

use anyhow::{bail, Context, Result};
use segtool_core::dataset::{FolderDataset, SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;

/// `shapes` (the built-in stream, `split` picks train or val) or a dataset folder.
pub fn open_dataset(spec: &str, split: &str, shapes: &ShapesArgs) -> Result<Box<dyn SegDataset>> {
    if spec == "shapes" {
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
    let ds = FolderDataset::open(Path::new(spec), split)
        .with_context(|| format!("opening dataset {spec} (split {split})"))?;
    Ok(Box::new(ds))
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

/// Class names of a dataset argument: `shapes`' own, or the folder's classes.json.
pub fn dataset_classes(spec: &str) -> Result<(Vec<String>, Option<Vec<[u8; 3]>>)> {
    if spec == "shapes" {
        return Ok((
            segtool_core::shapes::CLASSES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            None,
        ));
    }
    let path = Path::new(spec).join("classes.json");
    let file = segtool_core::dataset::ClassesFile::read(&path)?;
    Ok((file.classes, file.palette))
}
