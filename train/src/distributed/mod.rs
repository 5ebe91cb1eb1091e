//! Distributed data-parallel training over libtorch's c10d (gloo on CPU):
//!
//! * [`ProcessGroup`]: TCPStore rendezvous + ProcessGroupGloo and its collectives
//!   (all_reduce sum/avg/max, broadcast, all_gather, barrier), each with a timeout, through
//!   the C++ shim csrc/c10d_shim.cpp;
//! * [`Ddp`]: rank 0's model broadcast at the start, bucketed gradient averaging;
//! * [`sync_bn`]: BatchNorm with statistics over the global batch;
//! * [`DistEnv`] / [`launch`]: a rank's place from torchrun's (or Slurm's) environment
//!   variables, and a launcher that spawns and supervises one process per rank.

pub mod ddp;
pub mod launch;
pub mod process_group;
pub mod sync_bn;

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Context, Result};

pub use ddp::{Ddp, DEFAULT_BUCKET_MB};
pub use launch::{LaunchConfig, Launcher, SelfLaunch};
pub use process_group::{Backend, GroupOptions, ProcessGroup, ReduceOp};

/// Collective timeout when none is given (PyTorch's default is 30 min; a dead peer is
/// reported much sooner, when its sockets close).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// torchrun's default rendezvous port, and the base of the port a Slurm job derives.
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// Which launcher's variables a [`DistEnv`] was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvSource {
    /// torchrun's (and `segtool train --nproc-per-node`'s): `WORLD_SIZE`, `RANK`, ...
    Torchrun,
    /// A task started by Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, ...
    Slurm,
}

impl fmt::Display for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Torchrun => "torchrun",
            Self::Slurm => "Slurm",
        })
    }
}

/// A rank's place in the job.
///
/// From torchrun's environment variables: `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`,
/// `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`. When `WORLD_SIZE` and `RANK` are unset, from
/// the variables Slurm's `srun` gives each task (torchrun's, when present, win):
///
/// | field | Slurm variable |
/// | --- | --- |
/// | `rank` | `SLURM_PROCID` |
/// | `world_size` | `SLURM_NTASKS` |
/// | `local_rank` | `SLURM_LOCALID` |
/// | `local_world_size` | `SLURM_NTASKS_PER_NODE`, else this node's entry (`SLURM_NODEID`, else the first) of `SLURM_TASKS_PER_NODE` (`4(x2),3`) |
/// | `master_addr` | `MASTER_ADDR`, else the first host of `SLURM_JOB_NODELIST` (`node[01-04,07],gpu5`: `node01`) |
/// | `master_port` | `MASTER_PORT`, else `29500 + SLURM_JOB_ID % 1000` (29500 without a job id) |
///
/// The derived port is the same for every task of a job and differs between jobs that
/// share a node. A Slurm job of one task is a plain single-process run (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistEnv {
    pub master_addr: String,
    pub master_port: u16,
    pub world_size: usize,
    pub rank: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
    /// Where the values above came from.
    pub source: EnvSource,
}

/// The variable `key`'s value as a non-negative integer, `default` when unset.
fn number(
    get: &impl Fn(&str) -> Option<String>,
    key: &str,
    default: Option<usize>,
) -> Result<usize> {
    match get(key) {
        Some(v) => v
            .trim()
            .parse()
            .with_context(|| format!("{key}={v:?} is not a non-negative integer")),
        None => default.with_context(|| format!("{key} is not set")),
    }
}

fn port(key: &str, value: &str) -> Result<u16> {
    value
        .trim()
        .parse()
        .with_context(|| format!("{key}={value:?} is not a port number"))
}

impl DistEnv {
    /// `None` when neither torchrun's `WORLD_SIZE`/`RANK` nor Slurm's
    /// `SLURM_PROCID`/`SLURM_NTASKS` (with more than one task) are set: a plain
    /// single-process run.
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`Self::from_env`] over any variable source.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        if get("WORLD_SIZE").is_some() || get("RANK").is_some() {
            return Self::torchrun(&get).map(Some);
        }
        if get("SLURM_PROCID").is_some() && get("SLURM_NTASKS").is_some() {
            return Self::slurm(&get);
        }
        Ok(None)
    }

    fn torchrun(get: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        let world_size = number(get, "WORLD_SIZE", None)?;
        let rank = number(get, "RANK", None)?;
        let local_rank = number(get, "LOCAL_RANK", Some(rank))?;
        let local_world_size = number(get, "LOCAL_WORLD_SIZE", Some(world_size))?;
        let master_addr = get("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let master_port = match get("MASTER_PORT") {
            Some(p) => port("MASTER_PORT", &p)?,
            None => DEFAULT_MASTER_PORT,
        };
        if world_size == 0 || rank >= world_size {
            bail!("RANK={rank} is not below WORLD_SIZE={world_size}");
        }
        if local_rank >= local_world_size.max(1) {
            bail!("LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world_size}");
        }
        Ok(Self {
            master_addr,
            master_port,
            world_size,
            rank,
            local_rank,
            local_world_size,
            source: EnvSource::Torchrun,
        })
    }

    fn slurm(get: &impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let world_size = number(get, "SLURM_NTASKS", None)?;
        let rank = number(get, "SLURM_PROCID", None)?;
        if world_size == 0 || rank >= world_size {
            bail!("SLURM_PROCID={rank} is not below SLURM_NTASKS={world_size}");
        }
        if world_size == 1 {
            // One task: nothing to rendezvous with (and no port to hold on a shared node).
            return Ok(None);
        }
        let local_rank = number(get, "SLURM_LOCALID", None)?;
        let per_node = match get("SLURM_NTASKS_PER_NODE") {
            Some(_) => number(get, "SLURM_NTASKS_PER_NODE", None)?,
            None => {
                let value = get("SLURM_TASKS_PER_NODE").context(
                    "neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set \
                     (the tasks on this node)",
                )?;
                let counts = tasks_per_node(&value)
                    .with_context(|| format!("SLURM_TASKS_PER_NODE={value:?}"))?;
                let node = number(get, "SLURM_NODEID", Some(0))?;
                *counts.get(node).with_context(|| {
                    format!(
                        "SLURM_NODEID={node} but SLURM_TASKS_PER_NODE={value:?} lists {} node(s)",
                        counts.len()
                    )
                })?
            }
        };
        // `srun -n 2` in an allocation of 4 tasks per node sees the job's 4.
        let local_world_size = per_node.min(world_size);
        if local_rank >= local_world_size.max(1) {
            bail!(
                "SLURM_LOCALID={local_rank} is not below the {local_world_size} task(s) \
                 on this node (SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE)"
            );
        }
        let master_addr = match get("MASTER_ADDR") {
            Some(addr) => addr,
            None => {
                let (key, list) = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
                    .into_iter()
                    .find_map(|k| get(k).map(|v| (k, v)))
                    .context(
                        "MASTER_ADDR is not set and neither is SLURM_JOB_NODELIST \
                         (rank 0's host is its first node)",
                    )?;
                first_host(&list).with_context(|| format!("{key}={list:?}"))?
            }
        };
        let master_port = match (get("MASTER_PORT"), get("SLURM_JOB_ID")) {
            (Some(p), _) => port("MASTER_PORT", &p)?,
            (None, Some(job)) => {
                let id: u64 = job
                    .trim()
                    .parse()
                    .with_context(|| format!("SLURM_JOB_ID={job:?} is not a job number"))?;
                DEFAULT_MASTER_PORT + (id % 1000) as u16
            }
            (None, None) => DEFAULT_MASTER_PORT,
        };
        Ok(Some(Self {
            master_addr,
            master_port,
            world_size,
            rank,
            local_rank,
            local_world_size,
            source: EnvSource::Slurm,
        }))
    }

    /// The options to join this job's process group.
    /// The device is the CPU for gloo and this rank's GPU for NCCL (the local rank's, or
    /// the only one visible); [`GroupOptions::on_device`] sets the model's own.
    pub fn group_options(&self, backend: Backend, timeout: Duration) -> GroupOptions {
        let device = match backend {
            Backend::Gloo => tch::Device::Cpu,
            Backend::Nccl => crate::device::local_cuda_device(self.local_rank)
                .unwrap_or(tch::Device::Cuda(self.local_rank)),
        };
        GroupOptions {
            master_addr: self.master_addr.clone(),
            master_port: self.master_port,
            world_size: self.world_size,
            rank: self.rank,
            timeout,
            backend,
            device,
        }
    }
}

/// Slurm's compressed tasks-per-node list, one count per node: `4(x2),3` is
/// `[4, 4, 3]`.
pub fn tasks_per_node(value: &str) -> Result<Vec<usize>> {
    let mut counts = Vec::new();
    for entry in value.trim().split(',') {
        let entry = entry.trim();
        let (count, repeat) = match entry.split_once('(') {
            Some((count, rest)) => {
                let repeat = rest
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|r| r.parse::<usize>().ok())
                    .with_context(|| format!("{entry:?}: expected N or N(xM)"))?;
                (count, repeat)
            }
            None => (entry, 1),
        };
        let count: usize = count
            .parse()
            .with_context(|| format!("{entry:?}: expected N or N(xM)"))?;
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    if counts.is_empty() {
        bail!("no task counts");
    }
    Ok(counts)
}

/// The first host of a Slurm hostlist: `node[01-04,07],gpu5` is `node01`,
/// `rack[2-3]-n[1-8]` is `rack2-n1`, `login` is `login`.
pub fn first_host(list: &str) -> Result<String> {
    let list = list.trim();
    let mut host = String::new();
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let mut group = String::new();
                loop {
                    match chars.next() {
                        Some(']') => break,
                        Some('[') | None => bail!("unbalanced '[' in the hostlist"),
                        Some(c) => group.push(c),
                    }
                }
                // The group's first element: a number, or the start of a range.
                let first = group.split(',').next().unwrap_or("").trim();
                let (start, end) = first.split_once('-').unwrap_or((first, first));
                let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                if !digits(start) || !digits(end) {
                    bail!("[{group}]: expected numbers or ranges such as [01-04,07]");
                }
                if start.parse::<u64>().ok() > end.parse::<u64>().ok() {
                    bail!("[{group}]: the range {first} runs backwards");
                }
                host.push_str(start);
            }
            ']' => bail!("unbalanced ']' in the hostlist"),
            c if c.is_whitespace() => bail!("whitespace in the hostlist"),
            c => host.push(c),
        }
    }
    if host.is_empty() {
        bail!("no host in the hostlist");
    }
    Ok(host)
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
        assert_eq!(e.source, EnvSource::Torchrun);
    }

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        }
    }

    /// What srun gives task 5 of `--nodes=2 --ntasks-per-node=4` (job 123456).
    const SRUN: &[(&str, &str)] = &[
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "1"),
        ("SLURM_NTASKS_PER_NODE", "4"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ("SLURM_JOB_ID", "123456"),
    ];

    fn slurm(pairs: &[(&str, &str)]) -> Result<Option<DistEnv>> {
        DistEnv::from_lookup(lookup(pairs))
    }

    /// SRUN with `changes` applied: ("KEY", None) removes a variable.
    fn srun_with(changes: &[(&str, Option<&str>)]) -> Result<Option<DistEnv>> {
        let mut pairs: Vec<(&str, &str)> = SRUN
            .iter()
            .copied()
            .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
            .collect();
        pairs.extend(changes.iter().filter_map(|(k, v)| v.map(|v| (*k, v))));
        slurm(&pairs)
    }

    fn err(result: Result<Option<DistEnv>>) -> String {
        format!("{:#}", result.expect_err("expected an error"))
    }

    #[test]
    fn slurm_tasks_are_ranks() {
        let e = slurm(SRUN).unwrap().unwrap();
        assert_eq!(
            e,
            DistEnv {
                master_addr: "gpu07".into(),
                master_port: 29500 + 456,
                world_size: 8,
                rank: 5,
                local_rank: 1,
                local_world_size: 4,
                source: EnvSource::Slurm,
            }
        );
        assert_eq!(EnvSource::Slurm.to_string(), "Slurm");
        // Every task of the job derives the same port; another job another one.
        let other = srun_with(&[("SLURM_PROCID", Some("0")), ("SLURM_LOCALID", Some("0"))]);
        assert_eq!(other.unwrap().unwrap().master_port, e.master_port);
        let job = srun_with(&[("SLURM_JOB_ID", Some("123457"))])
            .unwrap()
            .unwrap();
        assert_eq!(job.master_port, 29957);
        let no_job = srun_with(&[("SLURM_JOB_ID", None)]).unwrap().unwrap();
        assert_eq!(no_job.master_port, DEFAULT_MASTER_PORT);
        // The rendezvous from the environment wins over the nodelist and the job id.
        let e = srun_with(&[
            ("MASTER_ADDR", Some("10.1.2.3")),
            ("MASTER_PORT", Some("4242")),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.master_addr.as_str(), e.master_port), ("10.1.2.3", 4242));
        // SLURM_NODELIST (older Slurm) when SLURM_JOB_NODELIST is missing.
        let e = srun_with(&[
            ("SLURM_JOB_NODELIST", None),
            ("SLURM_NODELIST", Some("cn5,cn9")),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(e.master_addr, "cn5");
    }

    #[test]
    fn slurm_tasks_per_node_forms() {
        // Without SLURM_NTASKS_PER_NODE: this node's entry of SLURM_TASKS_PER_NODE.
        let uneven = |node: Option<&str>, local: &str| {
            srun_with(&[
                ("SLURM_NTASKS_PER_NODE", None),
                ("SLURM_TASKS_PER_NODE", Some("3(x2),2")),
                ("SLURM_NODEID", node),
                ("SLURM_LOCALID", Some(local)),
            ])
        };
        assert_eq!(uneven(Some("0"), "1").unwrap().unwrap().local_world_size, 3);
        assert_eq!(uneven(Some("2"), "1").unwrap().unwrap().local_world_size, 2);
        // No node id: the first entry.
        assert_eq!(uneven(None, "0").unwrap().unwrap().local_world_size, 3);
        let message = err(uneven(Some("3"), "0"));
        assert!(message.contains("SLURM_NODEID=3"), "{message}");
        assert!(message.contains("3(x2),2"), "{message}");
        let message = err(uneven(Some("one"), "0"));
        assert!(message.contains("SLURM_NODEID=\"one\""), "{message}");
        let message = err(uneven(Some("2"), "2"));
        assert!(message.contains("SLURM_LOCALID=2"), "{message}");
        // SLURM_NTASKS_PER_NODE wins; a job's count larger than the step's is capped.
        let e = srun_with(&[
            ("SLURM_NTASKS", Some("2")),
            ("SLURM_PROCID", Some("1")),
            ("SLURM_NTASKS_PER_NODE", Some("4")),
            ("SLURM_TASKS_PER_NODE", Some("1(x2)")),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(e.local_world_size, 2);

        assert_eq!(tasks_per_node("4").unwrap(), [4]);
        assert_eq!(tasks_per_node("4(x2),3").unwrap(), [4, 4, 3]);
        assert_eq!(tasks_per_node("1,2(x3),1").unwrap(), [1, 2, 2, 2, 1]);
        for bad in ["", "4(x)", "4(2)", "x,3", "4(x2", "-1"] {
            assert!(tasks_per_node(bad).is_err(), "{bad:?}");
        }
        let message = err(srun_with(&[
            ("SLURM_NTASKS_PER_NODE", None),
            ("SLURM_TASKS_PER_NODE", Some("4(y2)")),
        ]));
        assert!(
            message.contains("SLURM_TASKS_PER_NODE=\"4(y2)\""),
            "{message}"
        );
        let message = err(srun_with(&[
            ("SLURM_NTASKS_PER_NODE", None),
            ("SLURM_TASKS_PER_NODE", None),
        ]));
        assert!(message.contains("SLURM_TASKS_PER_NODE"), "{message}");
    }

    #[test]
    fn slurm_hostlists() {
        for (list, first) in [
            ("node[01-04,07],gpu5", "node01"),
            ("node[07,01-04]", "node07"),
            ("gpu5,node[01-04]", "gpu5"),
            ("login", "login"),
            ("n[001-128]", "n001"),
            ("n[8]", "n8"),
            ("rack[2-3]-n[1-8]", "rack2-n1"),
            ("node[01-02]-ib", "node01-ib"),
            ("big-node-12.cluster", "big-node-12.cluster"),
        ] {
            assert_eq!(first_host(list).unwrap(), first, "{list}");
        }
        for bad in [
            "",
            "node[01-04",
            "node01]",
            "node[a-b]",
            "node[]",
            "node[04-01]",
            "a b",
        ] {
            assert!(first_host(bad).is_err(), "{bad:?}");
        }
        let message = err(srun_with(&[("SLURM_JOB_NODELIST", Some("node[01-"))]));
        assert!(
            message.contains("SLURM_JOB_NODELIST=\"node[01-\""),
            "{message}"
        );
        // One node needs no list when MASTER_ADDR is given; without either it is an error.
        let message = err(srun_with(&[("SLURM_JOB_NODELIST", None)]));
        assert!(message.contains("MASTER_ADDR"), "{message}");
        assert!(srun_with(&[
            ("SLURM_JOB_NODELIST", None),
            ("MASTER_ADDR", Some("127.0.0.1"))
        ])
        .unwrap()
        .is_some());
    }

    #[test]
    fn slurm_precedence_and_bad_values() {
        // torchrun's variables (e.g. torchrun inside an sbatch script) win over Slurm's.
        let mut pairs = SRUN.to_vec();
        pairs.extend([("WORLD_SIZE", "4"), ("RANK", "2"), ("LOCAL_RANK", "2")]);
        let e = slurm(&pairs).unwrap().unwrap();
        assert_eq!(
            (e.source, e.world_size, e.rank),
            (EnvSource::Torchrun, 4, 2)
        );
        assert_eq!(e.master_port, DEFAULT_MASTER_PORT);
        // Not a job step of several tasks: a plain run.
        assert_eq!(slurm(&[]).unwrap(), None);
        assert_eq!(slurm(&[("SLURM_NTASKS", "8")]).unwrap(), None);
        assert_eq!(slurm(&[("SLURM_PROCID", "0")]).unwrap(), None);
        assert_eq!(
            slurm(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]).unwrap(),
            None
        );
        // Bad values name the variable and the value.
        for (key, value, needle) in [
            ("SLURM_PROCID", "8", "SLURM_PROCID=8"),
            ("SLURM_PROCID", "five", "SLURM_PROCID=\"five\""),
            ("SLURM_NTASKS", "0", "SLURM_NTASKS=0"),
            ("SLURM_NTASKS", "-2", "SLURM_NTASKS=\"-2\""),
            ("SLURM_LOCALID", "4", "SLURM_LOCALID=4"),
            ("SLURM_LOCALID", "x", "SLURM_LOCALID=\"x\""),
            (
                "SLURM_NTASKS_PER_NODE",
                "four",
                "SLURM_NTASKS_PER_NODE=\"four\"",
            ),
            ("SLURM_JOB_ID", "12_3", "SLURM_JOB_ID=\"12_3\""),
            ("MASTER_PORT", "70000", "MASTER_PORT=\"70000\""),
        ] {
            let message = err(srun_with(&[(key, Some(value))]));
            assert!(message.contains(needle), "{key}={value}: {message}");
        }
        let message = err(srun_with(&[("SLURM_LOCALID", None)]));
        assert!(message.contains("SLURM_LOCALID is not set"), "{message}");
    }
}
