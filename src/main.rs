//! `segtool`: DANet training, ONNX export and inference from one binary. This file only
//! parses arguments; the work lives in the crates (train/, export/, runtime/).

mod args;
mod cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "segtool",
    version,
    about = "DANet: train on libtorch, export to ONNX, infer with ONNX Runtime or tract"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate the synthetic `shapes` dataset as a folder (images/<split>, masks/<split>).
    Generate(cmd::generate::Args),
    /// Train DANet on a dataset folder or the built-in `shapes` stream.
    #[cfg(feature = "train")]
    Train(cmd::train::Args),
    /// Evaluate a checkpoint's mIoU on a dataset (tch).
    #[cfg(feature = "train")]
    Eval(cmd::eval::Args),
    /// Convert PyTorch weights (DANet .pth/.pth.tar/.safetensors, torchvision ResNet) to a checkpoint.
    #[cfg(feature = "train")]
    Import(cmd::import::Args),
    /// Write a checkpoint as ONNX (no libtorch needed).
    Export(cmd::export::Args),
    /// Segment images with an exported model (ONNX Runtime or tract).
    Infer(cmd::infer::Args),
    /// The model card of an ONNX file (input, output, classes) and where each field came from.
    Card(cmd::card::Args),
    /// INT8 post-training quantisation: QDQ model, TensorRT calibration cache, int8 vs fp32 report.
    #[cfg(feature = "ort")]
    Calibrate(cmd::calibrate::Args),
    /// Per-layer cosine / SNR / max |diff| of two exports of one checkpoint (fp32 vs INT8, fp16, another target).
    #[cfg(feature = "ort")]
    Compare(cmd::compare::Args),
    /// ROS 2 without ROS 2: `ros2 node` (a segmentation node on the DDS bus), `ros2 bag`
    /// (a bag of camera frames into a bag of masks). Runs the segtool-ros2 binary.
    Ros2(cmd::ros2::Args),
    /// Latency/throughput of an exported model per batch size (pre, engine, post timed apart).
    Bench(cmd::bench::Args),
    /// Generate shapes, train a tiny DANet, export, and compare tch / ORT / tract.
    #[cfg(feature = "train")]
    Demo(cmd::demo::Args),
    /// What this build and machine can do: libtorch/CUDA/NCCL/gloo, ONNX Runtime providers, TensorRT, tract.
    Doctor(cmd::doctor::Args),
    /// Inspect a model configuration (`model info`: parameters, MACs, memory per module).
    #[cfg(feature = "train")]
    Model(cmd::model_info::Args),
    /// One self-contained HTML page about a run directory: curves, metrics, overlays, config, environment.
    #[cfg(feature = "train")]
    Report(cmd::report::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => cmd::generate::run(args),
        #[cfg(feature = "train")]
        Command::Train(args) => cmd::train::run(args),
        #[cfg(feature = "train")]
        Command::Eval(args) => cmd::eval::run(args),
        #[cfg(feature = "train")]
        Command::Import(args) => cmd::import::run(args),
        Command::Export(args) => cmd::export::run(args),
        Command::Infer(args) => cmd::infer::run(args),
        Command::Card(args) => cmd::card::run(args),
        Command::Ros2(args) => cmd::ros2::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        #[cfg(feature = "ort")]
        Command::Calibrate(args) => cmd::calibrate::run(args),
        #[cfg(feature = "ort")]
        Command::Compare(args) => cmd::compare::run(args),
        #[cfg(feature = "train")]
        Command::Demo(args) => cmd::demo::run(args),
        #[cfg(feature = "train")]
        Command::Model(args) => cmd::model_info::run(args),
        #[cfg(feature = "train")]
        Command::Report(args) => cmd::report::run(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
