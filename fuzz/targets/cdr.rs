//! ROS 2 CDR messages: the input is one selector byte, then a serialised message as DDS
//! carries it and bags store it (the 4-byte encapsulation header, then the CDR body).
//!
//! Selector bit 0: `sensor_msgs/msg/Image` or `CompressedImage`; bit 1: decoded by
//! `msgs::decode` (the bag converter's reader) or by RustDDS's `CDRDeserializerAdapter`
//! (what the node's subscriptions decode samples with). A decoded message goes to the
//! node's and the bag converter's frame readers, `frames::image_to_rgb` /
//! `compressed_to_rgb` (encodings, steps, short data; JPEG/PNG by their bytes).
//!
//! Refuses (returns at once) a compressed frame whose header declares more than 16 MiB
//! of pixels: decoding that much per input would leave the fuzzer a few executions a second.

use std::io::Cursor;

use rustdds::no_key::DeserializerAdapter;
use rustdds::{CDRDeserializerAdapter, RepresentationIdentifier};
use segtool_ros2::frames;
use segtool_ros2::msgs::{self, CompressedImage, Image};

pub fn run(data: &[u8]) {
    let Some((&selector, message)) = data.split_first() else {
        return;
    };
    if selector & 1 == 0 {
        if let Some(img) = decode::<Image>(selector, message) {
            let _ = frames::image_to_rgb(&img);
        }
    } else if let Some(img) = decode::<CompressedImage>(selector, message) {
        let declared = image::ImageReader::new(Cursor::new(&img.data.0[..]))
            .with_guessed_format()
            .ok()
            .and_then(|r| r.into_dimensions().ok())
            .map(|(w, h)| u64::from(w) * u64::from(h) * 8);
        if declared.is_none_or(|b| b <= 16 << 20) {
            let _ = frames::compressed_to_rgb(&img);
        }
    }
}

fn decode<M: msgs::RosMessage + 'static>(selector: u8, message: &[u8]) -> Option<M> {
    if selector & 2 == 0 {
        return msgs::decode::<M>(message).ok();
    }
    // As RustDDS hands a sample's serialized payload to the reader's adapter.
    if message.len() < 4 {
        return None;
    }
    let rep = RepresentationIdentifier::from_bytes(&message[..2]).ok()?;
    CDRDeserializerAdapter::<M>::from_bytes(&message[4..], rep).ok()
}
