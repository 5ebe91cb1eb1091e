use std::path::PathBuf;

use anyhow::Result;

use crate::args::{data::generate_shapes, ShapesArgs};

#[derive(clap::Args)]
pub struct Args {
    /// Output folder (images/<split>, masks/<split>, classes.json).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub shapes: ShapesArgs,
}

pub fn run(args: Args) -> Result<()> {
    generate_shapes(&args.out, &args.shapes)
}
