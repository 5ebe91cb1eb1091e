use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_core::dataset::{write_classes, write_split, ClassesFile, ShapesDataset};

use super::ShapesArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Output folder (images/<split>, masks/<split>, classes.json).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub shapes: ShapesArgs,
}

pub fn run(args: Args) -> Result<()> {
    generate(&args.out, &args.shapes)
}

pub fn generate(out: &std::path::Path, shapes: &ShapesArgs) -> Result<()> {
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
    let palette = Some(segtool_core::palette::default_palette(classes.len()));
    write_classes(out, &ClassesFile { classes, palette })?;
    Ok(())
}
