//! Distributed training across two "hosts": two Linux network namespaces joined by a veth
//! pair (10.R.S.1 and 10.R.S.2), one rank in each (`ip netns exec`), rank 0's address as
//! MASTER_ADDR and GLOO_SOCKET_IFNAME naming each side's veth, as on two machines. The
//! ranks are this test binary re-executed (`--exact ddp_netns::child`): collectives, then 2 DDP +
//! SyncBN steps of the tiny DANet whose weights must agree on both ranks.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2; without them the test prints
//! `SKIPPED: <test>: <why>`, a counted skip (scripts/run_tests.py), not a pass.
//! The namespaces (and with them the veth pair) are deleted whatever happens.

use crate::common;

// segtool-testkit's skip helper, by path (this crate does not depend on testkit).
#[path = "../../../testkit/src/skip.rs"]
#[allow(dead_code)]
mod skip;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::spec;
use segtool_model_spec::BackboneSpec;
use segtool_train::distributed::{Backend, Ddp, DistEnv, ProcessGroup, ReduceOp};
use segtool_train::{TrainConfig, Trainer};
use tch::{Kind, Tensor};

const CHILD_VAR: &str = "SEGTOOL_NETNS_CHILD";
const OUT_VAR: &str = "SEGTOOL_NETNS_OUT";

/// The namespaces and the veth pair; removed on drop (also on a panic).
struct Netns {
    names: [String; 2],
    veth: [String; 2],
    addrs: [String; 2],
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl Netns {
    /// Two namespaces joined by a veth pair, both ends up with their addresses.
    fn create() -> Result<Self> {
        let id = std::process::id();
        let (a, b) = ((id >> 8) % 250 + 1, id % 250 + 1);
        let ns = Self {
            names: [format!("segtool-{id}-0"), format!("segtool-{id}-1")],
            veth: [
                format!("stv{}a", id % 100_000),
                format!("stv{}b", id % 100_000),
            ],
            addrs: [format!("10.{a}.{b}.1"), format!("10.{a}.{b}.2")],
        };
        // From here on, Drop cleans up whatever part got created.
        for name in &ns.names {
            ip(&["netns", "add", name])?;
        }
        ip(&[
            "link",
            "add",
            &ns.veth[0],
            "type",
            "veth",
            "peer",
            "name",
            &ns.veth[1],
        ])?;
        for r in 0..2 {
            ip(&["link", "set", &ns.veth[r], "netns", &ns.names[r]])?;
            let exec = |args: &[&str]| {
                let mut full = vec!["netns", "exec", &ns.names[r], "ip"];
                full.extend_from_slice(args);
                ip(&full)
            };
            exec(&[
                "addr",
                "add",
                &format!("{}/24", ns.addrs[r]),
                "dev",
                &ns.veth[r],
            ])?;
            exec(&["link", "set", &ns.veth[r], "up"])?;
            exec(&["link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end in it, and so the pair; the link
        // delete covers a pair not yet moved.
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth[0]])
            .stderr(Stdio::null())
            .status();
        for name in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", name])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Why this machine cannot run the test, if it cannot.
fn unsupported() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    if uid != "0" {
        return Some(format!(
            "not root (uid {uid}): network namespaces need CAP_NET_ADMIN"
        ));
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("no `ip` command (iproute2)".into());
    }
    let probe = format!("segtool-probe-{}", std::process::id());
    if let Err(e) = ip(&["netns", "add", &probe]) {
        return Some(format!("cannot create a network namespace: {e:#}"));
    }
    // Some containers allow creating a namespace but not entering it (no /sys remount).
    let entered = ip(&["netns", "exec", &probe, "true"]);
    let _ = ip(&["netns", "del", &probe]);
    entered
        .err()
        .map(|e| format!("cannot run a process in a network namespace: {e:#}"))
}

/// Starts rank `rank` inside its namespace.
fn spawn_rank(ns: &Netns, rank: usize, out: &Path) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.names[rank]])
        .arg(exe)
        .args([
            "--exact",
            "ddp_netns::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env(OUT_VAR, out)
        .env("MASTER_ADDR", &ns.addrs[0])
        .env("MASTER_PORT", "29500")
        .env("WORLD_SIZE", "2")
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", "0")
        .env("LOCAL_WORLD_SIZE", "1")
        .env("GLOO_SOCKET_IFNAME", &ns.veth[rank])
        .env("OMP_NUM_THREADS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().context("spawning a rank")
}

#[test]
fn two_namespaces_train_over_veth() {
    if let Some(why) = unsupported() {
        return skip::skipped(why);
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = match Netns::create() {
        Ok(ns) => ns,
        // E.g. a kernel without veth support: the namespaces cannot be joined here.
        Err(e) => {
            return skip::skipped(format_args!("cannot set up the veth pair: {e:#}"));
        }
    };
    eprintln!(
        "namespaces {:?}, veth {:?}, addresses {:?}",
        ns.names, ns.veth, ns.addrs
    );
    let start = Instant::now();
    let mut children: Vec<Child> = (0..2)
        .map(|r| spawn_rank(&ns, r, dir.path()).unwrap())
        .collect();
    // Watchdog: both ranks within 120 s, else kill them (Drop removes the namespaces).
    let deadline = start + Duration::from_secs(120);
    let mut codes = [None, None];
    while codes.iter().any(Option::is_none) && Instant::now() < deadline {
        for (r, child) in children.iter_mut().enumerate() {
            if codes[r].is_none() {
                codes[r] = child.try_wait().unwrap().map(|s| s.code());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs: Vec<String> = children
        .into_iter()
        .map(|mut child| {
            let _ = child.kill(); // only a rank still running past the deadline
            let output = child.wait_with_output().unwrap();
            String::from_utf8_lossy(&output.stderr).into_owned()
        })
        .collect();
    let secs = start.elapsed().as_secs_f64();
    for (r, log) in logs.iter().enumerate() {
        eprintln!("--- rank {r} (exit {:?}):\n{log}", codes[r]);
    }
    assert_eq!(
        codes,
        [Some(Some(0)), Some(Some(0))],
        "ranks after {secs:.1} s"
    );
    let read = |r: usize| -> Vec<(String, Tensor)> {
        let mut v =
            Tensor::read_safetensors(dir.path().join(format!("rank{r}.safetensors"))).unwrap();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let (w0, w1) = (read(0), read(1));
    assert_eq!(w0.len(), w1.len());
    for ((n0, t0), (n1, t1)) in w0.iter().zip(&w1) {
        assert_eq!(n0, n1);
        assert!(t0.equal(t1), "{n0} differs between the ranks");
    }
    eprintln!("2 ranks in 2 namespaces finished in {secs:.1} s, weights equal");
}

/// The ranks' entry point; a no-op in a normal test run.
#[test]
fn child() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    tch::set_num_threads(1);
    let out = PathBuf::from(std::env::var(OUT_VAR).unwrap());
    match rank_main(&out) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("child error: {e:#}");
            std::process::exit(3)
        }
    }
}

fn rank_main(out: &Path) -> Result<()> {
    let env = DistEnv::from_env()?.context("no torchrun environment")?;
    let group = Arc::new(ProcessGroup::new(
        &env.group_options(Backend::Gloo, Duration::from_secs(60)),
    )?);
    let mut t = Tensor::from_slice(&[env.rank as f32 + 1.0]);
    group.all_reduce(&mut t, ReduceOp::Sum)?;
    ensure!(t.double_value(&[0]) == 3.0, "all_reduce sum {t:?}");
    let mut big = Tensor::full([1 << 20], env.rank as f64, (Kind::Float, tch::Device::Cpu));
    group.all_reduce(&mut big, ReduceOp::Max)?;
    ensure!(big.min().double_value(&[]) == 1.0, "4 MB all_reduce max");
    eprintln!("rank {}: collectives ok", env.rank);

    let cfg = TrainConfig {
        iterations: 2,
        batch_size: 2,
        lr: 0.01,
        progress: false,
        seed: 3,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec(BackboneSpec::tiny(), 3), cfg)?;
    trainer.model.head.dropout = false;
    trainer.enable_sync_bn(group.clone());
    trainer.enable_ddp(Ddp::new(group, 0.05))?;
    // Each rank its own images (a different slice of a fixed tensor).
    let all = Tensor::arange(4 * 3 * 32 * 32, (Kind::Float, tch::Device::Cpu))
        .reshape([4, 3, 32, 32])
        .sin();
    let masks = all.select(1, 0).gt(0.0).to_kind(Kind::Int64);
    let start = 2 * env.rank as i64;
    let (images, masks) = (all.narrow(0, start, 2), masks.narrow(0, start, 2));
    for it in 0..2 {
        let loss = trainer.step(&images, &masks, it)?;
        eprintln!("rank {} step {it}: loss {loss:.5}", env.rank);
    }
    trainer
        .vs
        .save(out.join(format!("rank{}.safetensors", env.rank)))?;
    Ok(())
}
