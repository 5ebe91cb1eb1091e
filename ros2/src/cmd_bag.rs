//! `segtool-ros2 bag`: flags into [`ConvertOptions`], a progress bar (rate, ETA) on a
//! terminal, Ctrl-C into the converter's stop flag (a second Ctrl-C kills at once; the
//! next run removes what that leaves), and the report on stderr.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use segtool_ros2::bag::{Compression, Conversion, ConvertOptions};
use segtool_runtime::progress::Progress;

use crate::cmd_engine::ModelArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The bag: an .mcap file or a rosbag2 folder of MCAP files (sqlite3 .db3 bags are
    /// refused, with the command that converts them).
    #[arg(long, short)]
    pub input: PathBuf,
    /// The camera topic: sensor_msgs/msg/Image or CompressedImage.
    #[arg(long, short)]
    pub topic: String,
    /// The MCAP bag to write (replaced once the new one is complete).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Namespace of the output topics PREFIX/class_mask, PREFIX/color_mask,
    /// PREFIX/overlay (default: the camera topic's; /cam/image_raw -> /cam/class_mask).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Also carry every message of the input (all topics) through unchanged, so the output
    /// plays (`ros2 bag play`) and views (Foxglove) on its own.
    #[arg(long)]
    pub copy_input: bool,
    /// Chunk compression of the output.
    #[arg(long, default_value = "zstd", value_parser = parse_compression)]
    pub compression: Compression,
    /// The overlay's blend: 0 is the frame, 1 the palette.
    #[arg(long, default_value_t = segtool_runtime::DEFAULT_ALPHA)]
    pub alpha: f32,
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    match s {
        "zstd" => Ok(Compression::Zstd),
        "lz4" => Ok(Compression::Lz4),
        "none" => Ok(Compression::None),
        _ => Err(format!("`{s}`: expected zstd, lz4 or none")),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
    // The next one kills: a run stuck in one long frame still ends on a second Ctrl-C.
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
}

pub fn run(args: Args) -> Result<()> {
    if !(0.0..=1.0).contains(&args.alpha) {
        anyhow::bail!("--alpha {}: expected 0 to 1", args.alpha);
    }
    let options = ConvertOptions {
        input: args.input,
        topic: args.topic,
        output: args.out,
        prefix: args.prefix,
        copy_input: args.copy_input,
        compression: args.compression,
        alpha: args.alpha,
    };
    // The bag's mistakes before the model's load, which can take minutes (TensorRT).
    let conversion = Conversion::prepare(options.clone())?;
    let (model, mut segmenter) = args.model.open(&Default::default())?;
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler stores to an atomic and resets its own disposition.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    eprintln!(
        "{} {} ({} frames) -> {} ({}: {} on {})",
        options.input.display(),
        options.topic,
        conversion.frames(),
        options.output.display(),
        model.display(),
        segmenter.engine().name(),
        segmenter.engine().provider()
    );
    let bar = Bar::default();
    let result = conversion.run(&mut segmenter, &bar, &STOP);
    bar.clear();
    let report = result?;

    let secs = report.elapsed.as_secs_f64();
    let model_share = report.segmenting.as_secs_f64() / secs.max(1e-9);
    eprintln!(
        "{}: {} of {} frames segmented in {secs:.1} s ({:.1} frames/s, {:.0}% in the model) \
         into {}, {}, {}",
        report.output.display(),
        report.segmented,
        report.frames,
        report.frames as f64 / secs.max(1e-9),
        100.0 * model_share,
        report.topics.class_mask,
        report.topics.color_mask,
        report.topics.overlay,
    );
    if options.copy_input {
        eprintln!("  {} input messages copied", report.copied);
    }
    if !report.bad.is_empty() {
        let bad: u64 = report.bad.iter().map(|b| b.count).sum();
        eprintln!("  {bad} bad frames, without masks (not an error; the bag has the rest):");
        for b in &report.bad {
            eprintln!("    {} x {}; first: {}", b.count, b.cause, b.first);
        }
    }
    Ok(())
}

/// The loop as an indicatif bar (drawn only on a terminal); with no terminal, the lines
/// (first bad frame of each cause) on stderr.
#[derive(Default)]
struct Bar(Mutex<Option<ProgressBar>>);

impl Bar {
    fn with(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self.0.lock().expect("progress bar lock").as_ref() {
            f(bar);
        }
    }

    fn clear(&self) {
        self.with(|b| b.finish_and_clear());
    }
}

impl Progress for Bar {
    fn start(&self, _what: &str, total: u64, done: u64) {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("[{bar:30}] {pos}/{len} frames {per_sec} ETA {eta} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_position(done);
        *self.0.lock().expect("progress bar lock") = Some(bar);
    }

    fn advance(&self, n: u64) {
        self.with(|b| b.inc(n));
    }

    fn message(&self, text: String) {
        self.with(|b| b.set_message(text));
    }

    fn line(&self, text: String) {
        // No terminal (CI logs, pipes): indicatif draws nothing, the lines stand in.
        self.with(|b| match b.is_hidden() {
            true => eprintln!("{text}"),
            false => b.println(text),
        });
    }
}
