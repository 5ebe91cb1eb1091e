//! A torchrun-style launcher: spawns one process per local rank with torchrun's
//! environment (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`), relays their stderr line by line prefixed with the rank, and
//! supervises them: when one exits non-zero the others are killed, and the error names
//! the failing rank, its exit status and the last lines it wrote to stderr.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::DistEnv;

#[derive(Clone, Debug)]
pub struct LaunchConfig {
    pub nproc_per_node: usize,
    pub nnodes: usize,
    pub node_rank: usize,
    pub master_addr: String,
    /// `None`: a free local port for a single-node job, torchrun's 29500 otherwise.
    pub master_port: Option<u16>,
    /// Lines of each rank's stderr kept for the failure report.
    pub tail_lines: usize,
}

impl Default for LaunchConfig {
    fn default() -> Self {
        Self {
            nproc_per_node: 1,
            nnodes: 1,
            node_rank: 0,
            master_addr: "127.0.0.1".into(),
            master_port: None,
            tail_lines: 20,
        }
    }
}

/// A rank that exited non-zero (or was killed by a signal).
#[derive(Debug, thiserror::Error)]
#[error("rank {rank} (pid {pid}) failed: {status}; the other ranks were stopped{}", tail_text(.stderr_tail))]
pub struct RankFailed {
    pub rank: usize,
    pub pid: u32,
    pub status: ExitStatus,
    /// Its last stderr lines, oldest first.
    pub stderr_tail: Vec<String>,
}

fn tail_text(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut s = format!("\nlast {} stderr line(s) of that rank:", lines.len());
    for l in lines {
        s.push_str("\n  | ");
        s.push_str(l);
    }
    s
}

pub struct Launcher {
    pub config: LaunchConfig,
}

struct Running {
    rank: usize,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    relay: Option<JoinHandle<()>>,
}

impl Launcher {
    pub fn new(config: LaunchConfig) -> Result<Self> {
        let c = &config;
        if c.nproc_per_node == 0 || c.nnodes == 0 {
            bail!("--nproc-per-node and --nnodes must be positive");
        }
        if c.node_rank >= c.nnodes {
            bail!(
                "--node-rank {} is not below --nnodes {}",
                c.node_rank,
                c.nnodes
            );
        }
        Ok(Self { config })
    }

    /// The environment of each local rank of this node.
    pub fn rank_envs(&self) -> Result<Vec<DistEnv>> {
        let c = &self.config;
        let port = match c.master_port {
            Some(p) => p,
            None if c.nnodes == 1 => free_port()?,
            None => 29500,
        };
        let world_size = c.nproc_per_node * c.nnodes;
        Ok((0..c.nproc_per_node)
            .map(|local_rank| DistEnv {
                master_addr: c.master_addr.clone(),
                master_port: port,
                world_size,
                rank: c.node_rank * c.nproc_per_node + local_rank,
                local_rank,
                local_world_size: c.nproc_per_node,
                source: super::EnvSource::Torchrun,
            })
            .collect())
    }

    /// Spawns `command(env)` for each local rank, with the torchrun variables of `env`
    /// set, and waits for all. Ok when every rank exits 0; a [`RankFailed`] error for the
    /// first that does not (the others are then killed).
    pub fn run(&self, mut command: impl FnMut(&DistEnv) -> Command) -> Result<()> {
        let envs = self.rank_envs()?;
        let mut running: Vec<Running> = Vec::with_capacity(envs.len());
        for env in &envs {
            let mut cmd = command(env);
            cmd.env("MASTER_ADDR", &env.master_addr)
                .env("MASTER_PORT", env.master_port.to_string())
                .env("WORLD_SIZE", env.world_size.to_string())
                .env("RANK", env.rank.to_string())
                .env("LOCAL_RANK", env.local_rank.to_string())
                .env("LOCAL_WORLD_SIZE", env.local_world_size.to_string())
                .stderr(Stdio::piped());
            let child = match cmd.spawn() {
                Ok(child) => child,
                Err(e) => {
                    stop_all(&mut running);
                    return Err(e).with_context(|| format!("starting rank {}", env.rank));
                }
            };
            running.push(relay(env.rank, child, self.config.tail_lines));
        }
        self.supervise(running)
    }

    fn supervise(&self, mut running: Vec<Running>) -> Result<()> {
        let mut done = vec![false; running.len()];
        loop {
            for i in 0..running.len() {
                if done[i] {
                    continue;
                }
                let status = running[i]
                    .child
                    .try_wait()
                    .with_context(|| format!("waiting for rank {}", running[i].rank))?;
                let Some(status) = status else { continue };
                done[i] = true;
                if let Some(h) = running[i].relay.take() {
                    let _ = h.join(); // the pipe is closed: all its lines are in
                }
                if !status.success() {
                    let failed = &running[i];
                    let err = RankFailed {
                        rank: failed.rank,
                        pid: failed.child.id(),
                        status,
                        stderr_tail: failed.tail.lock().unwrap().iter().cloned().collect(),
                    };
                    stop_all(&mut running);
                    return Err(err.into());
                }
            }
            if done.iter().all(|d| *d) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts relaying `child`'s stderr as `[rank R] line`, keeping its last `keep` lines.
fn relay(rank: usize, mut child: Child, keep: usize) -> Running {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(keep)));
    let stderr = child.stderr.take().expect("stderr is piped");
    let lines = tail.clone();
    let relay = thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\n', '\r']);
            let _ = writeln!(std::io::stderr().lock(), "[rank {rank}] {line}");
            let mut t = lines.lock().unwrap();
            if t.len() == keep {
                t.pop_front();
            }
            if keep > 0 {
                t.push_back(line.to_string());
            }
        }
    });
    Running {
        rank,
        child,
        tail,
        relay: Some(relay),
    }
}

/// Kills (by pid: only the children this launcher started) and reaps every rank still
/// running.
fn stop_all(running: &mut [Running]) {
    for r in running.iter_mut() {
        if let Ok(None) = r.child.try_wait() {
            let _ = r.child.kill();
        }
    }
    for r in running.iter_mut() {
        let _ = r.child.wait();
        if let Some(h) = r.relay.take() {
            let _ = h.join();
        }
    }
}

/// A TCP port that was free on 127.0.0.1 a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("finding a free port for MASTER_PORT")?;
    Ok(listener.local_addr()?.port())
}

/// `segtool train --nproc-per-node N`: this program started again once per local rank,
/// with its own arguments less the launcher's flags (and their values), torchrun's
/// environment, and `OMP_NUM_THREADS` (when not set) the cores shared out among the
/// ranks, as torchrun does. Prepared with [`SelfLaunch::new`], started with
/// [`SelfLaunch::run`].
pub struct SelfLaunch {
    launcher: Launcher,
    exe: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
    threads: String,
}

impl SelfLaunch {
    /// Checks `config` and that this process is not itself one rank of a distributed
    /// job; `launcher_flags` (e.g. `--nproc-per-node`) are dropped from the children's
    /// arguments, in both `--flag value` and `--flag=value` spelling.
    pub fn new(config: LaunchConfig, launcher_flags: &[&str]) -> Result<Self> {
        if let Some(env) = DistEnv::from_env()? {
            let vars = match env.source {
                super::EnvSource::Torchrun => "RANK/WORLD_SIZE are set",
                super::EnvSource::Slurm => {
                    "SLURM_PROCID/SLURM_NTASKS say this is one of several srun tasks"
                }
            };
            bail!("--nproc-per-node/--nnodes inside a distributed job ({vars}): drop them");
        }
        let nproc = config.nproc_per_node;
        let launcher = Launcher::new(config)?;
        let exe = std::env::current_exe().context("locating the segtool binary")?;
        let mut args = Vec::new();
        let mut raw = std::env::args_os().skip(1);
        while let Some(arg) = raw.next() {
            let text = arg.to_string_lossy();
            if launcher_flags.contains(&text.as_ref()) {
                raw.next(); // its value
            } else if !launcher_flags
                .iter()
                .any(|f| text.starts_with(&format!("{f}=")))
            {
                args.push(arg);
            }
        }
        let threads = std::env::var("OMP_NUM_THREADS").unwrap_or_else(|_| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cores / nproc).max(1).to_string()
        });
        Ok(Self {
            launcher,
            exe,
            args,
            threads,
        })
    }

    /// Spawns and supervises the ranks (see [`Launcher::run`]).
    pub fn run(self) -> Result<()> {
        self.launcher.run(|_env| {
            let mut cmd = Command::new(&self.exe);
            cmd.args(&self.args).env("OMP_NUM_THREADS", &self.threads);
            cmd
        })
    }
}
