//! ROS 2 bags: the input is one selector byte, then a whole `.mcap` file, or (selector
//! bit 0) a rosbag2 folder's `metadata.yaml` up to a NUL byte and then its `bag.mcap`.
//!
//! Converts it as `segtool-ros2 bag` does (`bag::Conversion::prepare`: the files, their
//! magic, summaries or a scan for the topics, the first camera topic found; then `run`
//! with the tiny model on tract: every message read, CRCs checked, frames decoded from
//! CDR, segmented, masks written to a scratch `.mcap`). Bit 1 copies the input through
//! (`--copy-input`), bit 2 compresses the output with zstd (else none, the faster).
//!
//! Refuses nothing.

use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};

use segtool_ros2::bag::{Compression, Conversion, ConvertOptions, InputBag};
use segtool_runtime::{EngineKind, Segmenter};

fn segmenter() -> &'static Mutex<Segmenter> {
    static SEG: OnceLock<Mutex<Segmenter>> = OnceLock::new();
    SEG.get_or_init(|| {
        Mutex::new(
            Segmenter::builder(super::support::tiny_model())
                .engine(EngineKind::Tract)
                .open()
                .expect("tiny model"),
        )
    })
}

pub fn run(data: &[u8]) {
    let mut input = super::support::Bytes::new(data);
    let selector = input.u8();
    let dir = super::support::fresh_dir("bag");
    let bag = if selector & 1 != 0 {
        std::fs::write(dir.join("metadata.yaml"), input.until_nul()).unwrap();
        std::fs::write(dir.join("bag.mcap"), input.rest()).unwrap();
        dir.clone()
    } else {
        let file = dir.join("in.mcap");
        std::fs::write(&file, input.rest()).unwrap();
        file
    };
    let Ok(opened) = InputBag::open(&bag) else {
        return;
    };
    let Some(topic) = opened.topics().iter().find(|t| opened.image_topic(&t.name).is_ok()) else {
        return;
    };
    let mut options = ConvertOptions::new(&bag, &topic.name, dir.join("out.mcap"));
    options.copy_input = selector & 2 != 0;
    options.compression = if selector & 4 != 0 { Compression::Zstd } else { Compression::None };
    let Ok(conversion) = Conversion::prepare(options) else {
        return;
    };
    let mut seg = segmenter().lock().unwrap_or_else(|e| e.into_inner());
    let stop = AtomicBool::new(false);
    let _ = conversion.run(&mut seg, &segtool_runtime::progress::Silent, &stop);
}
