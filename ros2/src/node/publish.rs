//! The node's output side: each camera's mask publishers, which pictures are wanted (a
//! subscriber and the parameters), and the thread that publishes every answered frame.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use ros2_client::dds::{Node, Publisher};
use segtool_runtime::batching::{LiveOutcome, MultiStream, SourceFrame};
use segtool_runtime::{colorize, overlay};

use super::Waiting;
use crate::diagnostics::Window;
use crate::frames;
use crate::msgs::Image;
use crate::param_services::Live;

/// One camera's three mask publishers.
pub(super) struct Outputs {
    pub(super) class_mask: Publisher<Image>,
    pub(super) color_mask: Publisher<Image>,
    pub(super) overlay: Publisher<Image>,
    /// Which pictures someone subscribes to ([`COLOR`], [`OVERLAY`] bits), refreshed by
    /// the main loop.
    pub(super) wanted: AtomicU8,
    /// Which pictures the parameters ask for, and the overlay's alpha.
    pub(super) live: Arc<Live>,
}

const COLOR: u8 = 1;
pub(super) const OVERLAY: u8 = 2;

impl Outputs {
    pub(super) fn refresh_wanted(&self, node: &Node) {
        let mut bits = 0;
        if self.color_mask.get_subscription_count(node) > 0 {
            bits |= COLOR;
        }
        if self.overlay.get_subscription_count(node) > 0 {
            bits |= OVERLAY;
        }
        self.wanted.store(bits, Ordering::Relaxed);
    }

    /// A picture is drawn when someone subscribes to it and the parameters ask for it.
    pub(super) fn wants(&self, bit: u8) -> bool {
        let asked = match bit {
            COLOR => self.live.publish_color_mask(),
            _ => self.live.publish_overlay(),
        };
        asked && self.wanted.load(Ordering::Relaxed) & bit != 0
    }
}

/// The publishing thread: each answered frame's three masks, with its header, on its
/// camera's topics.
pub(super) fn publish_masks(
    stream: &MultiStream,
    index: &HashMap<String, usize>,
    waiting: &Waiting,
    window: &Mutex<Window>,
    outputs: &[Arc<Outputs>],
    palette: &[[u8; 3]],
) {
    while let Some(SourceFrame { source, frame }) = stream.next() {
        let Some(&k) = index.get(&source) else {
            continue;
        };
        let outputs = &outputs[k];
        let entry = waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(k, frame.frame));
        let (LiveOutcome::Answered(out), Some((header, img))) = (frame.outcome, entry) else {
            continue;
        };
        let mask = out.mask;
        // The class mask first (what a robot acts on), then the pictures. Best effort: a
        // reader that cannot keep up loses masks, not the node.
        let _ = outputs
            .class_mask
            .publish(frames::class_mask(&header, &mask));
        let latency = frame.submitted.elapsed();
        let (color, overlaid) = (outputs.wants(COLOR), outputs.wants(OVERLAY));
        if color {
            let color = colorize(&mask, palette);
            let _ = outputs
                .color_mask
                .publish(frames::rgb_message_of(&header, color));
        }
        // A subscriber that joined while this frame was in the engine gets the next one.
        let overlaid = overlaid && img.is_some();
        if let Some(img) = img.filter(|_| overlaid) {
            let blended = overlay(&img, &mask, palette, outputs.live.alpha());
            let _ = outputs
                .overlay
                .publish(frames::rgb_message_of(&header, blended));
        }
        window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(latency, color, overlaid);
    }
}
