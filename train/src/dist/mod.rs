//! Distributed data-parallel training over libtorch's c10d (gloo on CPU):
//!
//! * [`ProcessGroup`]: TCPStore rendezvous + ProcessGroupGloo and its collectives
//!   (all_reduce sum/avg/max, broadcast, all_gather, barrier), each with a timeout, through
//!   the C++ shim csrc/c10d_shim.cpp;
//! * [`Ddp`]: rank 0's model broadcast at the start, bucketed gradient averaging;
//! * [`sync_bn`]: BatchNorm with statistics over the global batch;
//! * [`DistEnv`] / [`launch`]: torchrun's environment variables, and a launcher that
//!   spawns and supervises one process per rank.

pub mod ddp;
pub mod launch;
pub mod process_group;
pub mod sync_bn;

use std::time::Duration;

use anyhow::{bail, Context, Result};

pub use ddp::{Ddp, DEFAULT_BUCKET_MB};
pub use launch::{LaunchConfig, Launcher};
pub use process_group::{Backend, GroupOptions, ProcessGroup, ReduceOp};

/// Collective timeout when none is given (PyTorch's default is 30 min; a dead peer is
/// reported much sooner, when its sockets close).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A rank's place in the job, from torchrun's environment variables: `MASTER_ADDR`,
/// `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistEnv {
    pub master_addr: String,
    pub master_port: u16,
    pub world_size: usize,
    pub rank: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
}

impl DistEnv {
    /// `None` when `WORLD_SIZE` and `RANK` are unset (a plain single-process run).
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`Self::from_env`] over any variable source.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        if get("WORLD_SIZE").is_none() && get("RANK").is_none() {
            return Ok(None);
        }
        let num = |key: &str, default: Option<usize>| -> Result<usize> {
            match get(key) {
                Some(v) => v
                    .trim()
                    .parse()
                    .with_context(|| format!("{key}={v:?} is not a non-negative integer")),
                None => default.with_context(|| format!("{key} is not set")),
            }
        };
        let world_size = num("WORLD_SIZE", None)?;
        let rank = num("RANK", None)?;
        let local_rank = num("LOCAL_RANK", Some(rank))?;
        let local_world_size = num("LOCAL_WORLD_SIZE", Some(world_size))?;
        let master_addr = get("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let master_port = match get("MASTER_PORT") {
            Some(p) => p
                .trim()
                .parse()
                .with_context(|| format!("MASTER_PORT={p:?} is not a port number"))?,
            None => 29500,
        };
        if world_size == 0 || rank >= world_size {
            bail!("RANK={rank} is not below WORLD_SIZE={world_size}");
        }
        if local_rank >= local_world_size.max(1) {
            bail!("LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world_size}");
        }
        Ok(Some(Self {
            master_addr,
            master_port,
            world_size,
            rank,
            local_rank,
            local_world_size,
        }))
    }

    /// The options to join this job's process group.
    pub fn group_options(&self, backend: Backend, timeout: Duration) -> GroupOptions {
        GroupOptions {
            master_addr: self.master_addr.clone(),
            master_port: self.master_port,
            world_size: self.world_size,
            rank: self.rank,
            timeout,
            backend,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_parsing() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(DistEnv::from_lookup(env(&[])).unwrap(), None);
        let e = DistEnv::from_lookup(env(&[
            ("WORLD_SIZE", "4"),
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.world_size, e.rank, e.local_rank, e.local_world_size),
            (4, 3, 1, 2)
        );
        assert_eq!((e.master_addr.as_str(), e.master_port), ("10.0.0.1", 1234));
        assert!(DistEnv::from_lookup(env(&[("WORLD_SIZE", "2"), ("RANK", "2")])).is_err());
        assert!(DistEnv::from_lookup(env(&[("WORLD_SIZE", "2")])).is_err());
        assert!(DistEnv::from_lookup(env(&[
            ("WORLD_SIZE", "2"),
            ("RANK", "0"),
            ("MASTER_PORT", "x")
        ]))
        .is_err());
    }
}
