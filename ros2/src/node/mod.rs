//! The live node: camera messages off the DDS bus into the runtime's newest-frame stream,
//! masks back onto the bus.
//!
//! - Subscribes `image` (`sensor_msgs/msg/Image`), or `image/compressed`
//!   (`sensor_msgs/msg/CompressedImage`) with [`Transport::Compressed`]; names resolved in
//!   the node's namespace after remapping ([`crate::ros_args`]); the compressed topic is
//!   the remapped image topic plus `/compressed`, as image_transport names it.
//! - Publishes `class_mask`, `color_mask` and `overlay` (see [`crate::frames`]), each with
//!   the camera message's header, and `/diagnostics` once a period
//!   ([`crate::diagnostics`]).
//! - Many cameras, one model ([`NodeConfig::image_topics`]): every camera topic is a
//!   source of one [`MultiStream`] on one [`BatchServer`] (one model, one engine session;
//!   each run takes at most one frame per camera), and each camera's outputs go to its
//!   own namespace: for `/cam_front/image_raw`, `/cam_front/<node name>/class_mask` and
//!   so on ([`camera_topics`] has the rule). `/diagnostics` then carries one status per
//!   camera besides the node's. A camera that goes quiet never stalls the others.
//! - QoS: sensor data (best effort, keep last 5, volatile) by default, reliable (keep
//!   last 10) when asked, for the camera and the masks alike; `/diagnostics` reliable.
//! - Newest frame wins: each camera a source of the runtime's [`MultiStream`] with one
//!   slot ([`SourceConfig::newest`]; one camera alone is served as a `LatestStream` is). A frame that waits
//!   while the engine is busy is replaced by the next and counted as dropped; nothing
//!   queues without bound. Camera messages lost before the node took them (on the way,
//!   or overwritten in a DDS history) are counted as lost, from the gaps in each
//!   publisher's sequence numbers ([`crate::sequence`]).
//! - A bad message is counted under its cause, reported once per cause through the event
//!   callback, and never stops later frames.
//! - The pictures (`color_mask`, `overlay`) are drawn only while someone subscribes to
//!   them, as ros_deep_learning's segnet does: on a small machine their drawing would
//!   otherwise take CPU from the engine for images nobody looks at. ros2-client's spinner
//!   (a thread of its own) keeps the count of matched subscribers.
//!
//! The node adds no segmentation logic: the masks are the [`Segmenter`]'s.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use image::RgbImage;
use ros2_client::dds::rustdds::mio1::{Events, Interest, Poll, Token};
use ros2_client::dds::{Context, ContextOptions, Node, Publisher, Subscription};
use ros2_client::qos::{Durability, History, Reliability, WhenFull};
use ros2_client::{MessageInfo, MessageTypeName, Name, NodeName, QosProfile};
use segtool_runtime::batching::{BatchConfig, BatchServer, MultiStream, SourceConfig, SourceError};
use segtool_runtime::{Segmenter, DEFAULT_ALPHA};

use crate::diagnostics::{self, CameraStats, NodeStats, Window};
use crate::frames::{self, BadFrame};
use crate::msgs::{split_name, CompressedImage, DiagnosticArray, Header, Image, RosMessage, Time};
use crate::param_services::{self, Live};
use crate::params::Value;
use crate::ros_args::RosArgs;
use crate::sequence::SequenceGaps;

mod publish;
mod topics;

use publish::{publish_masks, Outputs, OVERLAY};
pub use topics::{camera_namespace, camera_topics, CameraTopics};

/// Which camera topic the node takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// `image`, `sensor_msgs/msg/Image`.
    #[default]
    Raw,
    /// `image/compressed`, `sensor_msgs/msg/CompressedImage` (JPEG or PNG).
    Compressed,
}

/// The topic names as the node's code writes them (resolved under its namespace, then
/// remapped): the camera, the class ids, the colour mask and the overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topics {
    pub input: String,
    pub class_mask: String,
    pub color_mask: String,
    pub overlay: String,
}

impl Default for Topics {
    fn default() -> Self {
        Self {
            input: "image".into(),
            class_mask: "class_mask".into(),
            color_mask: "color_mask".into(),
            overlay: "overlay".into(),
        }
    }
}

/// How the node runs.
#[derive(Clone)]
pub struct NodeConfig {
    /// The node's name (`__node:=` overrides it).
    pub name: String,
    /// `--ros-args`: namespace, remaps.
    pub ros: RosArgs,
    /// The DDS domain (`ROS_DOMAIN_ID`).
    pub domain_id: u16,
    pub transport: Transport,
    /// Reliable QoS instead of sensor data.
    pub reliable: bool,
    pub topics: Topics,
    /// Several camera topics served by one model (`image_topics`); empty: the one
    /// camera topic of [`Topics::input`]. Each is resolved as the node's code writes it
    /// (relative names in the node's namespace, remaps applied); see [`camera_topics`].
    pub image_topics: Vec<String>,
    /// Every declared parameter with its value at start, offered through the parameter
    /// services ([`crate::param_services`]).
    pub parameters: Vec<(&'static str, Value)>,
    /// What may change while the node runs: alpha, which pictures to publish, how often
    /// `/diagnostics` is published.
    pub live: Arc<Live>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            name: "segtool".into(),
            ros: RosArgs::default(),
            domain_id: 0,
            transport: Transport::Raw,
            reliable: false,
            topics: Topics::default(),
            image_topics: Vec::new(),
            parameters: Vec::new(),
            live: Arc::new(Live::new(DEFAULT_ALPHA, true, true, Duration::from_secs(1))),
        }
    }
}

/// What the node reports while it runs.
#[derive(Clone, Debug)]
pub enum NodeEvent {
    /// Subscribed and publishing: each camera's resolved topic names.
    Started {
        node: String,
        cameras: Vec<CameraTopics>,
        domain_id: u16,
    },
    /// The first bad message of a cause (later ones are only counted).
    BadMessage {
        topic: String,
        cause: &'static str,
        reason: String,
    },
    /// The figures just published on `/diagnostics`.
    Diagnostics(NodeStats),
}

/// Why the node could not run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("DDS: {0}")]
    Dds(String),
    #[error("topic name {name:?}: {reason}")]
    Name { name: String, reason: String },
    /// A parameter the node cannot run with (`image_topics` and the output topics).
    #[error("{0}")]
    Parameter(String),
    #[error(transparent)]
    Batch(#[from] segtool_runtime::batching::BatchError),
    #[error(transparent)]
    Source(#[from] SourceError),
}

fn dds(e: impl std::fmt::Debug) -> NodeError {
    NodeError::Dds(format!("{e:?}"))
}

/// Frames in the engine, by camera and frame index: their header, and their pixels while
/// an overlay is wanted.
type Waiting = Mutex<HashMap<(usize, u64), (Header, Option<RgbImage>)>>;

fn qos(reliable: bool) -> QosProfile {
    let base = QosProfile::subscription_default().durability(Durability::Volatile);
    if reliable {
        base.reliability(Reliability::Reliable {
            when_full: WhenFull::DEFAULT,
        })
        .history(History::KeepLast { depth: 10 })
    } else {
        base.history(History::KeepLast { depth: 5 })
    }
}

fn now() -> Time {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Time::from_nanos(d.as_nanos() as u64)
}

fn topic<M: RosMessage>(
    node: &mut Node,
    name: &str,
    qos: &QosProfile,
) -> Result<ros2_client::dds::rustdds::Topic, NodeError> {
    let parsed = Name::parse(name).map_err(|e| NodeError::Name {
        name: name.into(),
        reason: format!("{e:?}"),
    })?;
    let (package, ty) = split_name(M::NAME);
    node.create_topic(&parsed, MessageTypeName::new(package, ty), qos)
        .map_err(dds)
}

/// The camera subscription, of either transport.
enum Camera {
    Raw(Subscription<Image>),
    Compressed(Subscription<CompressedImage>),
}

impl Camera {
    /// The next message as a frame: `None` when none is waiting. Its sequence number
    /// goes to `gaps`, which adds the publisher's messages skipped before it to `lost`.
    fn take(
        &self,
        gaps: &mut SequenceGaps,
        lost: &mut u64,
    ) -> Option<(Header, Result<RgbImage, BadFrame>)> {
        let mut note = |info: &MessageInfo| {
            *lost += gaps.observe(info.publisher_gid(), info.sequence_number());
        };
        let taken = match self {
            Camera::Raw(s) => s.take().map(|m| {
                m.map(|(msg, info)| {
                    note(&info);
                    (msg.header.clone(), frames::into_rgb(msg))
                })
            }),
            Camera::Compressed(s) => s.take().map(|m| {
                m.map(|(msg, info)| {
                    note(&info);
                    (msg.header.clone(), frames::compressed_to_rgb(&msg))
                })
            }),
        };
        match taken {
            Ok(m) => m,
            // A sample that does not deserialise as the type: a bad frame like the others.
            Err(e) => Some((
                Header::default(),
                Err(BadFrame::Undecodable(format!("{e:?}"))),
            )),
        }
    }

    fn register(&mut self, poll: &Poll, token: Token) -> std::io::Result<()> {
        match self {
            Camera::Raw(s) => poll.registry().register(s, token, Interest::READABLE),
            Camera::Compressed(s) => poll.registry().register(s, token, Interest::READABLE),
        }
    }
}

/// Runs the node until `stop` is set; returns the final figures.
pub fn run(
    segmenter: Segmenter,
    config: &NodeConfig,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(NodeEvent),
) -> Result<NodeStats, NodeError> {
    let cameras = camera_topics(config)?;
    let mut wired = connect(config, &cameras)?;
    let engine_status = diagnostics::EngineStatus::of(&segmenter);
    let spec = segmenter.spec().clone();
    let palette = spec.palette.clone();
    // One engine session for every camera; a run takes at most one frame of each. For one
    // camera this is `BatchConfig::live(1, 1)`: batches of one, started at once.
    let n = cameras.len();
    let batch = BatchConfig::new()
        .with_max_batch(n)
        .with_max_wait(Duration::ZERO)
        .with_queue_capacity(2 * n);
    let server = BatchServer::from_segmenters(batch, vec![segmenter])?;
    let stream = Arc::new(server.multi_stream());
    for c in &cameras {
        stream.add_source(&c.camera, SourceConfig::newest())?;
    }
    let waiting: Arc<Waiting> = Arc::default();
    let window = Arc::new(Mutex::new(Window::new()));
    on_event(NodeEvent::Started {
        node: wired.node_name.clone(),
        cameras: cameras.clone(),
        domain_id: config.domain_id,
    });

    let publisher_thread = {
        let (stream, waiting, window) = (stream.clone(), waiting.clone(), window.clone());
        let outputs: Vec<Arc<Outputs>> = wired.cameras.iter().map(|c| c.outputs.clone()).collect();
        let index: HashMap<String, usize> = cameras
            .iter()
            .enumerate()
            .map(|(k, c)| (c.camera.clone(), k))
            .collect();
        std::thread::Builder::new()
            .name("segtool-ros2-publish".into())
            .spawn(move || publish_masks(&stream, &index, &waiting, &window, &outputs, &palette))
            .map_err(|e| NodeError::Dds(format!("cannot start the publishing thread: {e}")))?
    };

    let mut intake: Vec<Intake> = (0..n).map(|_| Intake::default()).collect();
    let served = serve(
        &mut wired,
        &stream,
        &waiting,
        &window,
        &engine_status,
        config,
        &mut intake,
        stop,
        on_event,
    );
    stream.finish();
    let _ = publisher_thread.join();
    let mut stats = served?;
    refresh(&mut stats, &intake, &stream, &window, per_camera(config));
    drop(server);
    Ok(stats)
}

/// The diagnostics carry a status per camera when the node serves `image_topics`.
fn per_camera(config: &NodeConfig) -> bool {
    !config.image_topics.is_empty()
}

/// One camera on the bus: its topics, subscription and publishers.
struct WiredCamera {
    topics: CameraTopics,
    subscription: Camera,
    outputs: Arc<Outputs>,
}

/// The node on the bus: its camera subscriptions, mask and diagnostics publishers, and
/// the spinner that answers parameter services and counts matched subscribers.
struct Wired {
    node: Node,
    node_name: String,
    cameras: Vec<WiredCamera>,
    diagnostics: Publisher<DiagnosticArray>,
}

/// Creates the node, each camera's topics (resolved by [`camera_topics`]) and the
/// spinner.
fn connect(config: &NodeConfig, cameras: &[CameraTopics]) -> Result<Wired, NodeError> {
    let ros = &config.ros;
    let name = ros.node_name.clone().unwrap_or_else(|| config.name.clone());
    let context =
        Context::with_options(ContextOptions::new().domain_id(config.domain_id)).map_err(dds)?;
    let node_name = NodeName::new(ros.namespace(), &name).map_err(|e| NodeError::Name {
        name: name.clone(),
        reason: format!("{e:?}"),
    })?;
    let node_name_text = node_name.fully_qualified_name();
    let mut node = context
        .new_node(
            node_name,
            param_services::node_options(&config.parameters, config.live.clone()),
        )
        .map_err(dds)?;
    config.live.set_running();
    let qos = qos(config.reliable);
    let mut wired_cameras = Vec::with_capacity(cameras.len());
    for c in cameras {
        let subscription = match config.transport {
            Transport::Raw => {
                let t = topic::<Image>(&mut node, &c.input, &qos)?;
                Camera::Raw(node.create_subscription(&t, None).map_err(dds)?)
            }
            Transport::Compressed => {
                let t = topic::<CompressedImage>(&mut node, &c.input, &qos)?;
                Camera::Compressed(node.create_subscription(&t, None).map_err(dds)?)
            }
        };
        let mut publisher = |n: &str| -> Result<Publisher<Image>, NodeError> {
            let t = topic::<Image>(&mut node, n, &qos)?;
            node.create_publisher(&t, None).map_err(dds)
        };
        let outputs = Arc::new(Outputs {
            class_mask: publisher(&c.outputs[0])?,
            color_mask: publisher(&c.outputs[1])?,
            overlay: publisher(&c.outputs[2])?,
            wanted: AtomicU8::new(0),
            live: config.live.clone(),
        });
        wired_cameras.push(WiredCamera {
            topics: c.clone(),
            subscription,
            outputs,
        });
    }
    let diag_qos = qos_reliable_diagnostics();
    let diag_topic =
        topic::<DiagnosticArray>(&mut node, &ros.resolve(&name, "/diagnostics"), &diag_qos)?;
    let diagnostics_pub: Publisher<DiagnosticArray> =
        node.create_publisher(&diag_topic, None).map_err(dds)?;
    // Matched subscribers are counted by the spinner; it stops when the node is dropped.
    let spinner = node.spinner().map_err(dds)?;
    std::thread::Builder::new()
        .name("segtool-ros2-spin".into())
        .spawn(move || {
            let _ = futures::executor::block_on(spinner.spin());
        })
        .map_err(|e| NodeError::Dds(format!("cannot start the spinner thread: {e}")))?;

    Ok(Wired {
        node,
        node_name: node_name_text,
        cameras: wired_cameras,
        diagnostics: diagnostics_pub,
    })
}

/// What the node took off one camera's topic.
#[derive(Default)]
struct Intake {
    received: u64,
    sent: u64,
    lost: u64,
    bad: BTreeMap<String, u64>,
    gaps: SequenceGaps,
}

/// The camera loop: each camera's frames taken off the bus into its source of the stream
/// (the newest wins), diagnostics every period, until `stop`.
#[allow(clippy::too_many_arguments)]
fn serve(
    wired: &mut Wired,
    stream: &MultiStream,
    waiting: &Waiting,
    window: &Mutex<Window>,
    engine_status: &diagnostics::EngineStatus,
    config: &NodeConfig,
    intake: &mut [Intake],
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(NodeEvent),
) -> Result<NodeStats, NodeError> {
    let Wired {
        node,
        node_name,
        cameras,
        diagnostics: diagnostics_pub,
    } = wired;
    let mut poll = Poll::new().map_err(dds)?;
    for (k, c) in cameras.iter_mut().enumerate() {
        c.subscription.register(&poll, Token(k)).map_err(dds)?;
    }
    let mut events = Events::with_capacity(8);
    let mut stats = NodeStats::default();
    let mut next_diagnostics = Instant::now() + config.live.diagnostics_period();
    while !stop.load(Ordering::Relaxed) {
        let wait = next_diagnostics
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(100));
        match poll.poll(&mut events, Some(wait)) {
            // A signal (SIGINT ends the node): the loop condition decides.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => other.map_err(dds)?,
        }
        // Edge-triggered: take everything that has arrived on every camera (also after a
        // timeout, in case an edge came between takes). A quiet camera has nothing.
        for (k, (c, took)) in cameras.iter().zip(intake.iter_mut()).enumerate() {
            c.outputs.refresh_wanted(node);
            let Intake {
                received,
                sent,
                lost,
                bad,
                gaps,
            } = took;
            while let Some((header, frame)) = c.subscription.take(gaps, lost) {
                *received += 1;
                match frame {
                    Ok(img) => {
                        // The overlay needs the frame again; nothing else does.
                        let copy = c.outputs.wants(OVERLAY).then(|| img.clone());
                        // Under the lock, so that the publisher never sees the answer first.
                        let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
                        let index = stream.submit(&c.topics.camera, img)?;
                        w.insert((k, index), (header, copy));
                        *sent += 1;
                    }
                    Err(why) => {
                        let count = bad.entry(why.cause().to_string()).or_insert(0);
                        *count += 1;
                        if *count == 1 {
                            on_event(NodeEvent::BadMessage {
                                topic: c.topics.input.clone(),
                                cause: why.cause(),
                                reason: why.to_string(),
                            });
                        }
                    }
                }
            }
        }
        if Instant::now() >= next_diagnostics {
            next_diagnostics += config.live.diagnostics_period();
            refresh(&mut stats, intake, stream, window, per_camera(config));
            let msg = diagnostics::message(node_name, &stats, engine_status, now());
            // A full send window is not worth stopping the camera for.
            let _ = diagnostics_pub.publish(msg);
            on_event(NodeEvent::Diagnostics(stats.clone()));
        }
    }
    Ok(stats)
}

fn qos_reliable_diagnostics() -> QosProfile {
    QosProfile::publisher_default().history(History::KeepLast { depth: 10 })
}

/// The node's figures: what each camera's topic brought (`intake`), answered, dropped,
/// failed and each camera's latency from the stream, the node's rate and latency from
/// the window; each camera's own figures too when `per_camera`.
fn refresh(
    stats: &mut NodeStats,
    intake: &[Intake],
    stream: &MultiStream,
    window: &Mutex<Window>,
    per_camera: bool,
) {
    let sources = stream.stats();
    stats.received = intake.iter().map(|i| i.received).sum();
    stats.sent = intake.iter().map(|i| i.sent).sum();
    stats.lost = intake.iter().map(|i| i.lost).sum();
    stats.bad.clear();
    for i in intake {
        for (cause, n) in &i.bad {
            *stats.bad.entry(cause.clone()).or_insert(0) += n;
        }
    }
    stats.answered = sources.iter().map(|s| s.counts.answered).sum();
    stats.dropped = sources.iter().map(|s| s.counts.dropped()).sum();
    stats.failed = sources.iter().map(|s| s.counts.failed).sum();
    stats.cameras = match per_camera {
        true => sources
            .into_iter()
            .zip(intake)
            .map(|(s, i)| CameraStats {
                topic: s.name,
                received: i.received,
                sent: i.sent,
                lost: i.lost,
                bad: i.bad.clone(),
                counts: s.counts,
                latency: s.latency,
            })
            .collect(),
        false => Vec::new(),
    };
    window
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .close(stats);
}
