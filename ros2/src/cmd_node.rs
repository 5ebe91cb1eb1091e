//! `segtool-ros2 node`: flags and `--ros-args` into a [`NodeConfig`], signals into the
//! node's stop flag, its events onto stderr (one line each).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use segtool_ros2::node::{self, NodeConfig, NodeEvent, Transport};
use segtool_ros2::ros_args::RosArgs;

use crate::cmd_engine::ModelArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// raw (`image`, sensor_msgs/Image) or compressed (`image/compressed`, JPEG or PNG).
    /// Also `-p transport:=compressed`.
    #[arg(long, default_value = "raw", value_parser = parse_transport)]
    pub transport: Transport,
    /// Reliable QoS for the camera and the masks (default: sensor data, best effort).
    /// Also `-p reliable:=true`.
    #[arg(long)]
    pub reliable: bool,
    /// The node's name (`-r __node:=NAME` overrides it).
    #[arg(long, default_value = "segtool")]
    pub name: String,
    /// Seconds between `/diagnostics` messages.
    #[arg(long, default_value_t = 1.0)]
    pub diagnostics_period: f64,
}

fn parse_transport(s: &str) -> Result<Transport, String> {
    match s {
        "raw" => Ok(Transport::Raw),
        "compressed" => Ok(Transport::Compressed),
        _ => Err(format!("`{s}`: expected raw or compressed")),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// `ROS_DOMAIN_ID` as ROS 2 reads it (unset or empty: 0).
fn domain_id() -> Result<u16> {
    match std::env::var("ROS_DOMAIN_ID") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|d| *d <= 232)
            .with_context(|| format!("ROS_DOMAIN_ID={v:?} is not a domain id (0-232)")),
        _ => Ok(0),
    }
}

/// Every frame allocates buffers of hundreds of kilobytes (the message, the image, the
/// masks, their CDR) and frees them a few milliseconds later. glibc maps allocations that
/// large afresh and hands freed ones back to the kernel, so each frame paid its buffers
/// again in page faults (15-20% of the node's CPU outside the engine, by `perf`). Keeping
/// them in the process: mapped only above 64 MiB, trimmed only above 256 MiB.
fn keep_freed_frames() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// How often the node hands freed memory back (segtool_runtime::expert::memory). The thresholds
/// above keep a burst's buffers after it ends (a backlog after a stall: the DDS cache's
/// samples and fragments, the queue), so without a trim RSS stays at the high-water mark
/// for the life of the node (a 30-minute soak: 266 -> 325 MiB in one step at 25 minutes,
/// never given back).
const TRIM_EVERY: Duration = Duration::from_secs(30);

pub fn run(args: Args, ros: RosArgs) -> Result<()> {
    keep_freed_frames();
    for note in &ros.ignored {
        eprintln!("note: --ros-args {note} has no effect on this node");
    }
    let param = |k: &str| ros.params.get(k).map(String::as_str);
    let transport = match param("transport") {
        Some(t) => parse_transport(t).map_err(anyhow::Error::msg)?,
        None => args.transport,
    };
    let reliable = match param("reliable") {
        Some("true") => true,
        Some("false") => false,
        Some(other) => bail!("-p reliable:={other}: expected true or false"),
        None => args.reliable,
    };
    if !(args.diagnostics_period > 0.0 && args.diagnostics_period.is_finite()) {
        bail!("--diagnostics-period must be a positive number of seconds");
    }
    let (path, segmenter) = args.model.open(param("model"))?;
    let config = NodeConfig {
        name: args.name.clone(),
        ros: ros.clone(),
        domain_id: domain_id()?,
        transport,
        reliable,
        diagnostics_period: Duration::from_secs_f64(args.diagnostics_period),
    };
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let engine = format!(
        "{} on {}",
        segmenter.engine().name(),
        segmenter.engine().provider()
    );
    let stats = node::run(segmenter, &config, &STOP, &mut |event| match event {
        NodeEvent::Started {
            node,
            input,
            outputs,
            domain_id,
        } => eprintln!(
            "node {node} (domain {domain_id}): {} ({engine}); {input} -> {}",
            path.display(),
            outputs.join(", ")
        ),
        NodeEvent::BadMessage {
            topic,
            cause,
            reason,
        } => eprintln!("bad message on {topic} ({cause}): {reason}; counting later ones"),
        NodeEvent::Diagnostics(s) => {
            segtool_runtime::expert::memory::release_freed_heap_every(TRIM_EVERY);
            eprintln!(
                "{:.1} Hz, latency p50 {:.1} ms p99 {:.1} ms; answered {}, dropped {}, lost {}, bad {}",
                s.rate_hz,
                s.latency_p50_ms,
                s.latency_p99_ms,
                s.answered,
                s.dropped,
                s.lost,
                s.bad_total()
            );
        }
    })?;
    eprintln!(
        "stopped: received {}, answered {}, dropped {}, failed {}, bad {}, lost {}",
        stats.received,
        stats.answered,
        stats.dropped,
        stats.failed,
        stats.bad_total(),
        stats.lost
    );
    Ok(())
}
