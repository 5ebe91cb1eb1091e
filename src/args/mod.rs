//! Argument types and helpers shared by several subcommands (this is not a subcommand),
//! so that no subcommand module imports another: the built-in dataset's flags and dataset
//! opening ([`data`]), the device flag, the progress bar the training commands draw
//! ([`progress`]), the inference engine flags ([`engine`]) and image sizes ([`size`]).

pub mod card;
pub mod data;
pub mod engine;
pub mod progress;
pub mod size;
pub mod triton;

#[cfg(feature = "train")]
pub use data::open_dataset;
pub use data::ShapesArgs;

/// `--device` of the libtorch commands.
#[cfg(feature = "train")]
#[derive(clap::Args, Clone, Debug)]
pub struct DeviceArgs {
    /// cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[cfg(feature = "train")]
impl DeviceArgs {
    /// The device; in a distributed run (`dist`), `cuda` is the local rank's GPU.
    pub fn resolve(
        &self,
        dist: Option<&segtool_train::distributed::DistEnv>,
    ) -> anyhow::Result<tch::Device> {
        segtool_train::device::device_for(&self.device, dist.map(|d| d.local_rank))
    }
}
