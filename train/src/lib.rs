//! segtool-train: DANet on libtorch through tch.
//!
//! The model mirrors DANet v0.5.0's PyTorch module tree, so state dicts move between the
//! two by name; the training loop follows the published recipe (SGD, head at 10x lr, poly
//! decay, CE on three outputs with the ignore label).

pub mod amp;
pub mod checkpoint;
pub mod data;
pub mod datasets;
pub mod device;
pub mod distributed;
pub mod env_report;
pub mod eval;
pub mod import;
pub mod loader;
pub mod metrics_log;
pub mod model;
pub mod ohem;
pub mod optim;
pub mod photometric;
pub mod presets;
pub mod progress;
pub mod qat;
pub mod report;
pub mod resize;
pub mod run;
pub mod session;
mod shim;
pub mod telemetry;
pub mod tensorboard;
pub mod trainer;

pub use checkpoint::Checkpoint;
pub use env_report::{env_report, TrainEnvReport};
pub use model::DaNet;
pub use session::{Event, Run, RunSummary};
pub use trainer::{TrainConfig, Trainer};

/// Builds a model for `spec` in a fresh VarStore on `device`, weights from `checkpoint`
/// when given.
///
/// Refuses, before allocating anything, a spec whose model has more parameters than the
/// file has bytes for (every parameter is stored as f32): a few bytes of edited spec would
/// otherwise allocate, and initialise, a model of any size.
pub fn load_model(
    checkpoint: &Checkpoint,
    device: tch::Device,
) -> anyhow::Result<(tch::nn::VarStore, DaNet)> {
    let params: u64 = model::module_costs(&checkpoint.spec, 64, 64, model::AttentionImpl::Explicit)
        .iter()
        .map(|c| c.params)
        .sum();
    if params.saturating_mul(4) > checkpoint.file_len() {
        anyhow::bail!(
            "the checkpoint's spec describes a model of {params} parameters ({} MiB as f32), \
             more than its {} bytes can hold: not the checkpoint of that spec (truncated, or \
             the spec edited?)",
            params.saturating_mul(4) >> 20,
            checkpoint.file_len()
        );
    }
    let mut vs = tch::nn::VarStore::new(device);
    let model = DaNet::new(&vs.root(), &checkpoint.spec);
    checkpoint.load_into(&mut vs)?;
    Ok((vs, model))
}
