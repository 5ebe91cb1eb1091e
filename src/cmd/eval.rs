use std::path::PathBuf;

use anyhow::Result;
use segtool_train::{load_model, Checkpoint};

use super::{open_dataset, ShapesArgs};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// `shapes` or a dataset folder.
    #[arg(long, default_value = "shapes")]
    pub data: String,
    #[arg(long, default_value = "val")]
    pub split: String,
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[command(flatten)]
    pub shapes: ShapesArgs,
}

pub fn run(args: Args) -> Result<()> {
    let device = super::train::parse_device(&args.device)?;
    let checkpoint = Checkpoint::read(&args.checkpoint)?;
    let (_vs, model) = load_model(&checkpoint, device)?;
    let dataset = open_dataset(&args.data, &args.split, &args.shapes)?;
    let result = segtool_train::eval::evaluate(
        &model,
        dataset.as_ref(),
        args.batch_size,
        device,
        |_, _| {},
    )?;
    for (class, iou) in checkpoint
        .spec
        .classes
        .iter()
        .zip(result.confusion.iou_per_class())
    {
        match iou {
            Some(v) => println!("{class:>16}  IoU {:.2}", v * 100.0),
            None => println!("{class:>16}  (absent)"),
        }
    }
    println!(
        "mIoU {:.2}  pixel acc {:.2}  ({} images, {:.1} img/s)",
        result.confusion.mean_iou() * 100.0,
        result.confusion.pixel_accuracy() * 100.0,
        result.images,
        result.images as f64 / result.seconds.max(1e-9)
    );
    Ok(())
}
