use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use segtool_runtime::{colorize, overlay, Backend, Segmenter, DEFAULT_ALPHA};

#[derive(clap::Args)]
pub struct Args {
    /// Exported model (.onnx from `segtool export`).
    #[arg(long)]
    pub model: PathBuf,
    /// An image file or a folder of images (png, jpg).
    #[arg(long)]
    pub input: PathBuf,
    /// Output folder: <name>_mask.png (palette colours) and <name>_overlay.png.
    #[arg(long, default_value = "segtool-out")]
    pub out: PathBuf,
    /// ort or tract.
    #[arg(long, default_value = "ort")]
    pub engine: String,
    /// ONNX Runtime execution providers in order of preference: cpu, cuda[:N],
    /// tensorrt[:N], tensorrt-fp16[:N]. Unavailable ones fall back to CPU (reported).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub providers: Vec<String>,
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
}

pub fn open_segmenter(model: &Path, engine: &str, providers: &[String]) -> Result<Segmenter> {
    let backend = match engine {
        #[cfg(feature = "ort")]
        "ort" => {
            let providers = providers
                .iter()
                .map(|p| {
                    p.parse::<segtool_runtime::Provider>()
                        .map_err(anyhow::Error::msg)
                })
                .collect::<Result<Vec<_>>>()?;
            Backend::Ort(segtool_runtime::OrtOptions::new().with_execution_providers(providers))
        }
        "tract" => Backend::Tract,
        other => bail!("unknown engine {other:?} (ort, tract)"),
    };
    Ok(Segmenter::open(model, backend)?)
}

fn list_images(input: &Path) -> Result<Vec<PathBuf>> {
    if input.is_file() {
        return Ok(vec![input.to_path_buf()]);
    }
    let files = segtool_core::dataset::list_images(input)
        .with_context(|| format!("reading input {}", input.display()))?;
    if files.is_empty() {
        bail!("no png/jpg images in {}", input.display());
    }
    Ok(files)
}

pub fn run(args: Args) -> Result<()> {
    let files = list_images(&args.input)?;
    let mut seg = open_segmenter(&args.model, &args.engine, &args.providers)?;
    eprintln!(
        "engine {} on {}",
        seg.engine().name(),
        seg.engine().provider()
    );
    let (mut images, mut seconds) = (0usize, 0.0f64);
    for chunk in files.chunks(args.batch_size.max(1)) {
        let imgs = chunk
            .iter()
            .map(|p| segtool_core::dataset::read_rgb(p).map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>()?;
        let t0 = Instant::now();
        let results = seg.segment_batch(&imgs)?;
        seconds += t0.elapsed().as_secs_f64();
        images += imgs.len();
        for ((path, img), result) in chunk.iter().zip(&imgs).zip(&results) {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let palette = &seg.spec().palette;
            for (suffix, picture) in [
                ("mask", colorize(result.mask.view(), palette)),
                (
                    "overlay",
                    overlay(img, result.mask.view(), palette, DEFAULT_ALPHA),
                ),
            ] {
                let out = args.out.join(format!("{stem}_{suffix}.png"));
                let png =
                    segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(picture));
                segtool_core::io::write_atomic(&out, &png)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
        }
    }
    println!(
        "{images} image(s) -> {} ({:.1} img/s, {})",
        args.out.display(),
        images as f64 / seconds.max(1e-9),
        seg.engine().provider()
    );
    Ok(())
}
