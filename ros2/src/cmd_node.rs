//! `segtool-ros2 node`: flags and `--ros-args` into a [`NodeConfig`], signals into the
//! node's stop flag, its events onto stderr (one line each).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use segtool_ros2::node::{self, NodeConfig, NodeEvent, Topics, Transport};
use segtool_ros2::param_services::Live;
use segtool_ros2::params::{self, Given, Value};
use segtool_ros2::ros_args::RosArgs;
use segtool_runtime::DEFAULT_ALPHA;

use crate::cmd_engine::ModelArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// raw (`image`, sensor_msgs/Image) or compressed (`image/compressed`, JPEG or PNG).
    /// Also `-p transport:=compressed`. Every flag can be given as a ROS parameter of the
    /// same name (`-p NAME:=VALUE`, `--params-file FILE`), which wins over the flag.
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

/// The node's configuration from the flags and the parameters `given`; every declared
/// parameter gets its value at start, for the parameter services.
fn node_config(args: &Args, ros: &RosArgs, given: &Given) -> Result<NodeConfig> {
    let transport = match given.string("transport") {
        Some(t) => parse_transport(t).map_err(|e| anyhow::anyhow!("parameter transport: {e}"))?,
        None => args.transport,
    };
    let reliable = given.bool("reliable").unwrap_or(args.reliable);
    let period = given
        .double("diagnostics_period")
        .unwrap_or(args.diagnostics_period);
    if !(period > 0.0 && period.is_finite()) {
        bail!("diagnostics_period must be a positive number of seconds, not {period}");
    }
    let alpha = given.double("alpha").unwrap_or(DEFAULT_ALPHA as f64);
    if !(0.0..=1.0).contains(&alpha) {
        bail!("alpha must be from 0 to 1, not {alpha}");
    }
    let image_topics = given
        .strings("image_topics")
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    if !image_topics.is_empty() && given.string("input_topic").is_some() {
        bail!(
            "input_topic and image_topics are both given: input_topic names the one camera, \
             image_topics several; give one of them"
        );
    }
    let defaults = Topics::default();
    let topic = |name: &str, default: String| given.string(name).map_or(default, str::to_string);
    let topics = Topics {
        input: topic("input_topic", defaults.input),
        class_mask: topic("class_mask_topic", defaults.class_mask),
        color_mask: topic("color_mask_topic", defaults.color_mask),
        overlay: topic("overlay_topic", defaults.overlay),
    };
    let (color, overlay) = (
        given.bool("publish_color_mask").unwrap_or(true),
        given.bool("publish_overlay").unwrap_or(true),
    );
    let live = Live::new(
        alpha as f32,
        color,
        overlay,
        Duration::from_secs_f64(period),
    );
    let (model, options) = args.model.resolve(given)?;
    let text = |s: &str| Value::String(s.to_string());
    let parameters = vec![
        ("model", text(&model.to_string_lossy())),
        (
            "card",
            text(
                &options
                    .card
                    .as_deref()
                    .map(|c| c.to_string_lossy())
                    .unwrap_or_default(),
            ),
        ),
        ("engine", text(options.engine.as_str())),
        ("providers", Value::StringArray(options.providers.clone())),
        ("device", text(options.device.as_str())),
        ("precision", text(options.precision.as_str())),
        ("hint", text(options.hint.as_str())),
        (
            "streams",
            Value::Integer(options.streams.unwrap_or(0) as i64),
        ),
        (
            "threads",
            Value::Integer(options.threads.unwrap_or(0) as i64),
        ),
        (
            "fixed_size",
            text(
                &options
                    .fixed_size
                    .map(|[h, w]| format!("{h}x{w}"))
                    .unwrap_or_default(),
            ),
        ),
        ("strict", Value::Bool(options.strict)),
        (
            "transport",
            text(match transport {
                Transport::Raw => "raw",
                Transport::Compressed => "compressed",
            }),
        ),
        ("reliable", Value::Bool(reliable)),
        ("input_topic", text(&topics.input)),
        ("image_topics", Value::StringArray(image_topics.clone())),
        ("class_mask_topic", text(&topics.class_mask)),
        ("color_mask_topic", text(&topics.color_mask)),
        ("overlay_topic", text(&topics.overlay)),
        ("publish_color_mask", Value::Bool(color)),
        ("publish_overlay", Value::Bool(overlay)),
        ("alpha", Value::Double(alpha)),
        ("diagnostics_period", Value::Double(period)),
    ];
    debug_assert_eq!(parameters.len(), params::DECLARED.len());
    let config = NodeConfig {
        name: args.name.clone(),
        ros: ros.clone(),
        domain_id: domain_id()?,
        transport,
        reliable,
        topics,
        image_topics,
        parameters,
        live: std::sync::Arc::new(live),
    };
    // The topics checked before the model is opened: a bad list fails at once.
    node::camera_topics(&config)?;
    Ok(config)
}

pub fn run(args: Args, ros: RosArgs) -> Result<()> {
    keep_freed_frames();
    for note in &ros.ignored {
        eprintln!("note: --ros-args {note} has no effect on this node");
    }
    // The flags give the defaults; the parameters (files, then -p) override them.
    let given = params::gather(&ros.params_files, &ros.params, &ros.full_name(&args.name))
        .map_err(anyhow::Error::msg)?;
    let config = node_config(&args, &ros, &given)?;
    let (path, segmenter) = args.model.open(&given)?;
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
            cameras,
            domain_id,
        } => match cameras.as_slice() {
            [one] => eprintln!(
                "node {node} (domain {domain_id}): {} ({engine}); {} -> {}",
                path.display(),
                one.input,
                one.outputs.join(", ")
            ),
            several => {
                eprintln!(
                    "node {node} (domain {domain_id}): {} ({engine}); {} cameras, one model",
                    path.display(),
                    several.len()
                );
                for c in several {
                    eprintln!("  {} -> {}", c.input, c.outputs.join(", "));
                }
            }
        },
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
            for c in &s.cameras {
                eprintln!(
                    "  {}: answered {}, dropped {}, failed {}, pending {}; latency p50 {:.1} ms p99 {:.1} ms",
                    c.topic,
                    c.counts.answered,
                    c.counts.dropped(),
                    c.counts.failed,
                    c.counts.pending,
                    c.latency.p50_ms,
                    c.latency.p99_ms
                );
            }
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
