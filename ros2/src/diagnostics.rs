//! The node's counters and their `/diagnostics` message: rate, latency p50/p99,
//! answered, dropped, lost, bad messages (in all and per cause), provider, fallbacks and
//! why, and the options the model was opened with.
//! The figures a robot's `diagnostic_aggregator` or `rqt_runtime_monitor` shows.
//! A node serving several cameras adds one status per camera: its topic, its counts
//! (the runtime's `MultiStream` counts, exact) and its latency p50/p99.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::msgs::{DiagnosticArray, DiagnosticStatus, Header, KeyValue, Time};

use segtool_runtime::batching::{Latency, LatestStats};
use segtool_runtime::expert::SegmenterExt;

/// What the node has done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeStats {
    /// Camera messages taken off the bus (good and bad).
    pub received: u64,
    /// Frames handed to the engine (received minus bad).
    pub sent: u64,
    /// Frames whose masks were published.
    pub answered: u64,
    /// Frames replaced by a newer one while the engine was busy.
    pub dropped: u64,
    /// Frames the engine failed on.
    pub failed: u64,
    /// Camera messages the node never took: skipped in their publisher's sequence numbers
    /// (lost on the way, or overwritten in a DDS history before the node took them).
    pub lost: u64,
    /// Bad messages per cause (see [`crate::frames::BadFrame::cause`]).
    pub bad: BTreeMap<String, u64>,
    /// Masks per second over the last period.
    pub rate_hz: f64,
    /// Camera message taken off the bus to its class mask published, over the last
    /// period, milliseconds.
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    /// Colour masks and overlays drawn and published: only while someone subscribes to
    /// them (and the parameters ask for them).
    pub color_masks: u64,
    pub overlays: u64,
    /// Each camera's own figures when the node serves `image_topics`, in their order
    /// (empty for the one camera of `input_topic`).
    pub cameras: Vec<CameraStats>,
}

/// One camera's figures, of a node serving several.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CameraStats {
    /// The camera's image topic.
    pub topic: String,
    /// Its messages taken off the bus (good and bad).
    pub received: u64,
    /// Its frames handed to the engine (received minus bad).
    pub sent: u64,
    /// Its messages the node never took (gaps in their publisher's sequence numbers).
    pub lost: u64,
    /// Its bad messages per cause.
    pub bad: BTreeMap<String, u64>,
    /// The runtime's counts of its frames: `submitted == answered + failed + replaced +
    /// expired + rejected + pending`.
    pub counts: LatestStats,
    /// Arrival-to-answer latency of its recent answered frames.
    pub latency: Latency,
}

impl CameraStats {
    /// Its bad messages of every cause.
    pub fn bad_total(&self) -> u64 {
        self.bad.values().sum()
    }
}

impl NodeStats {
    /// Bad messages of every cause.
    pub fn bad_total(&self) -> u64 {
        self.bad.values().sum()
    }
}

/// The latencies of one period, and when it began.
#[derive(Debug)]
pub(crate) struct Window {
    started: Instant,
    latencies_ms: Vec<f64>,
    /// Colour masks and overlays drawn and published in the period.
    color_masks: u64,
    overlays: u64,
}

impl Window {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            latencies_ms: Vec::new(),
            color_masks: 0,
            overlays: 0,
        }
    }

    /// One answered frame: its latency and which pictures were drawn for it.
    pub(crate) fn add(&mut self, latency: Duration, color_mask: bool, overlay: bool) {
        self.latencies_ms.push(latency.as_secs_f64() * 1e3);
        self.color_masks += u64::from(color_mask);
        self.overlays += u64::from(overlay);
    }

    /// Closes the period: its rate and percentiles into `stats`, then starts anew.
    pub(crate) fn close(&mut self, stats: &mut NodeStats) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        stats.rate_hz = self.latencies_ms.len() as f64 / secs;
        self.latencies_ms.sort_by(f64::total_cmp);
        let pick = |q: f64| -> f64 {
            match self.latencies_ms.len() {
                0 => 0.0,
                n => self.latencies_ms[((q * (n - 1) as f64).round() as usize).min(n - 1)],
            }
        };
        stats.latency_p50_ms = pick(0.50);
        stats.latency_p99_ms = pick(0.99);
        stats.color_masks += self.color_masks;
        stats.overlays += self.overlays;
        *self = Self::new();
    }
}

/// What opening the model found, as the diagnostics report it.
#[derive(Clone, Debug, Default)]
pub struct EngineStatus {
    /// `cpu`, `cuda:0`...
    pub provider: String,
    /// Every fallback taken, in one line.
    pub fallbacks: Option<String>,
    /// Which engine `--engine auto` chose and why (None: the engine was named).
    pub choice: Option<String>,
    /// The options the model was opened with, as the runtime reports them, in JSON.
    pub options: String,
}

impl EngineStatus {
    /// What `segmenter` reports of its opening.
    pub fn of(segmenter: &segtool_runtime::Segmenter) -> Self {
        Self {
            provider: segmenter.engine().provider().to_string(),
            fallbacks: segmenter.fallback_summary(),
            choice: segmenter.engine_choice().map(str::to_string),
            // Fails only for a card path that is not UTF-8: said so, not hidden.
            options: serde_json::to_string(segmenter.options())
                .unwrap_or_else(|e| format!("(not shown as JSON: {e})")),
        }
    }
}

/// The node's `/diagnostics` message at `now`.
pub fn message(node: &str, stats: &NodeStats, engine: &EngineStatus, now: Time) -> DiagnosticArray {
    let EngineStatus {
        provider,
        fallbacks,
        choice,
        options,
    } = engine;
    let fallbacks = fallbacks.as_deref();
    let kv = |key: &str, value: String| KeyValue {
        key: key.into(),
        value,
    };
    let mut values = vec![
        kv("rate_hz", format!("{:.2}", stats.rate_hz)),
        kv("latency_p50_ms", format!("{:.2}", stats.latency_p50_ms)),
        kv("latency_p99_ms", format!("{:.2}", stats.latency_p99_ms)),
        kv("received", stats.received.to_string()),
        kv("sent", stats.sent.to_string()),
        kv("answered", stats.answered.to_string()),
        kv("dropped", stats.dropped.to_string()),
        kv("failed", stats.failed.to_string()),
        kv("lost", stats.lost.to_string()),
        kv("bad_messages", stats.bad_total().to_string()),
        kv("color_masks_drawn", stats.color_masks.to_string()),
        kv("overlays_drawn", stats.overlays.to_string()),
        kv("provider", provider.to_string()),
        kv("fallbacks", fallbacks.unwrap_or("none").to_string()),
        kv(
            "engine_choice",
            choice.as_deref().unwrap_or("named").to_string(),
        ),
        kv("options", options.clone()),
    ];
    values.extend(
        stats
            .bad
            .iter()
            .map(|(cause, n)| kv(&format!("bad: {cause}"), n.to_string())),
    );
    let (level, message) = match (stats.failed, stats.bad_total(), fallbacks) {
        (f, _, _) if f > 0 => (DiagnosticStatus::ERROR, format!("{f} frame(s) failed")),
        (_, b, _) if b > 0 => (DiagnosticStatus::WARN, format!("{b} bad message(s)")),
        (_, _, Some(why)) => (DiagnosticStatus::WARN, format!("fallback: {why}")),
        _ => (DiagnosticStatus::OK, "segmenting".to_string()),
    };
    let mut status = vec![DiagnosticStatus {
        level,
        name: format!("{node}: segmentation"),
        message,
        hardware_id: provider.to_string(),
        values,
    }];
    if !stats.cameras.is_empty() {
        status[0]
            .values
            .push(kv("cameras", stats.cameras.len().to_string()));
    }
    status.extend(
        stats
            .cameras
            .iter()
            .map(|c| camera_status(node, c, provider)),
    );
    DiagnosticArray {
        header: Header {
            stamp: now,
            frame_id: String::new(),
        },
        status,
    }
}

/// One camera's status: named `<node>: camera <topic>`, its counts and latency.
fn camera_status(node: &str, c: &CameraStats, provider: &str) -> DiagnosticStatus {
    let kv = |key: &str, value: String| KeyValue {
        key: key.into(),
        value,
    };
    let n = &c.counts;
    let mut values = vec![
        kv("topic", c.topic.clone()),
        kv("received", c.received.to_string()),
        kv("sent", c.sent.to_string()),
        kv("submitted", n.submitted.to_string()),
        kv("answered", n.answered.to_string()),
        kv("dropped", n.dropped().to_string()),
        kv("replaced", n.replaced.to_string()),
        kv("expired", n.expired.to_string()),
        kv("rejected", n.rejected.to_string()),
        kv("failed", n.failed.to_string()),
        kv("pending", n.pending.to_string()),
        kv("lost", c.lost.to_string()),
        kv("bad_messages", c.bad_total().to_string()),
        kv("latency_p50_ms", format!("{:.2}", c.latency.p50_ms)),
        kv("latency_p99_ms", format!("{:.2}", c.latency.p99_ms)),
        kv("latency_samples", c.latency.samples.to_string()),
    ];
    values.extend(
        c.bad
            .iter()
            .map(|(cause, n)| kv(&format!("bad: {cause}"), n.to_string())),
    );
    let (level, message) = match (n.failed, c.bad_total()) {
        (f, _) if f > 0 => (DiagnosticStatus::ERROR, format!("{f} frame(s) failed")),
        (_, b) if b > 0 => (DiagnosticStatus::WARN, format!("{b} bad message(s)")),
        _ => (DiagnosticStatus::OK, "segmenting".to_string()),
    };
    DiagnosticStatus {
        level,
        name: format!("{node}: camera {}", c.topic),
        message,
        hardware_id: provider.to_string(),
        values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_carries_every_figure_and_warns_on_bad_messages() {
        let mut stats = NodeStats {
            answered: 9,
            dropped: 3,
            lost: 2,
            ..Default::default()
        };
        let mut w = Window::new();
        for ms in [10, 20, 30, 40] {
            w.add(Duration::from_millis(ms), ms >= 30, false);
        }
        w.close(&mut stats);
        w.add(Duration::from_millis(5), true, true);
        w.close(&mut stats);
        assert_eq!((stats.color_masks, stats.overlays), (3, 1));
        assert_eq!((stats.latency_p50_ms, stats.latency_p99_ms), (5.0, 5.0));
        stats.bad.insert("unknown encoding".into(), 2);
        let engine = EngineStatus {
            provider: "cpu".into(),
            ..Default::default()
        };
        let m = message("/seg/segtool", &stats, &engine, Time::default());
        let s = &m.status[0];
        assert_eq!(s.level, DiagnosticStatus::WARN);
        let get = |k: &str| s.values.iter().find(|v| v.key == k).unwrap().value.clone();
        assert_eq!(get("answered"), "9");
        assert_eq!(get("dropped"), "3");
        assert_eq!(get("lost"), "2");
        assert_eq!(get("bad: unknown encoding"), "2");
        assert_eq!(get("provider"), "cpu");
        assert_eq!(get("options"), "");
        assert_eq!(
            (get("color_masks_drawn"), get("overlays_drawn")),
            ("3".into(), "1".into())
        );
    }

    #[test]
    fn each_camera_has_a_status_of_its_own() {
        let camera = |topic: &str, answered, failed| CameraStats {
            topic: topic.into(),
            received: 5,
            sent: 5,
            counts: LatestStats {
                submitted: 5,
                answered,
                failed,
                replaced: 5 - answered - failed,
                ..Default::default()
            },
            latency: Latency {
                samples: answered as usize,
                p50_ms: 12.0,
                p99_ms: 30.5,
            },
            ..Default::default()
        };
        let stats = NodeStats {
            cameras: vec![camera("/front/image", 4, 0), camera("/rear/image", 2, 1)],
            ..Default::default()
        };
        let m = message("/seg", &stats, &EngineStatus::default(), Time::default());
        assert_eq!(m.status.len(), 3);
        let get = |s: &DiagnosticStatus, k: &str| {
            s.values.iter().find(|v| v.key == k).unwrap().value.clone()
        };
        assert_eq!(get(&m.status[0], "cameras"), "2");
        let (front, rear) = (&m.status[1], &m.status[2]);
        assert_eq!(front.name, "/seg: camera /front/image");
        assert_eq!(front.level, DiagnosticStatus::OK);
        assert_eq!(get(front, "answered"), "4");
        assert_eq!(get(front, "replaced"), "1");
        assert_eq!(get(front, "dropped"), "1");
        assert_eq!(get(front, "latency_p50_ms"), "12.00");
        assert_eq!(get(front, "latency_p99_ms"), "30.50");
        assert_eq!(rear.level, DiagnosticStatus::ERROR);
        assert_eq!(
            (get(rear, "failed"), get(rear, "pending")),
            ("1".into(), "0".into())
        );
        // One camera of input_topic: one status, as ever.
        let one = message(
            "/seg",
            &NodeStats::default(),
            &EngineStatus::default(),
            Time::default(),
        );
        assert_eq!(one.status.len(), 1);
    }

    #[test]
    fn the_options_the_model_was_opened_with_are_reported() {
        use segtool_runtime::{EngineKind, Segmenter, SegmenterOptions};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        let spec = segtool_testkit::tiny_spec(3);
        let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        std::fs::write(
            &path,
            segtool_testkit::tiny_model_bytes(&spec, &w, &[0.0; 3]),
        )
        .unwrap();
        // What the node's flags and parameters resolve to, each off its default where tract
        // takes it.
        let set = SegmenterOptions {
            engine: EngineKind::Tract,
            threads: Some(2),
            strict: true,
            logits: true,
            ..SegmenterOptions::default()
        };
        let seg = Segmenter::builder(&path)
            .options(&set)
            .unwrap()
            .open()
            .unwrap();
        let m = message(
            "/seg",
            &NodeStats::default(),
            &EngineStatus::of(&seg),
            Time::default(),
        );
        let json = &m.status[0]
            .values
            .iter()
            .find(|v| v.key == "options")
            .unwrap()
            .value;
        let reported: SegmenterOptions = serde_json::from_str(json).unwrap();
        assert_eq!(reported, set, "{json}");
    }
}
