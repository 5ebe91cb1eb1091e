//! `segtool-ros2` (also run as `segtool ros2 ...`): `node`, a live segmentation node on
//! the DDS bus, and `bag`, segmenting a ROS 2 bag into an MCAP bag of masks. Flags in,
//! library calls out; everything else is in the library.

mod cmd_bag;
mod cmd_engine;
mod cmd_node;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "segtool-ros2",
    version,
    about = "segtool's ROS 2 node and bag converter"
)]
enum Cli {
    /// A live segmentation node: subscribes `image` (or `image/compressed`), publishes
    /// `class_mask`, `color_mask`, `overlay` and `/diagnostics`. ROS 2's own arguments go
    /// after `--ros-args` (`-r image:=/cam/image_raw -r __ns:=/seg -p model:=m.onnx`).
    /// Several cameras, one model: `-p "image_topics:=[/front/image_raw, /rear/image_raw]"`
    /// (each camera's outputs in `<its namespace>/<node name>/`).
    Node(cmd_node::Args),
    /// Segments every Image or CompressedImage of a topic of a ROS 2 bag (MCAP file or
    /// rosbag2 folder) into an MCAP bag of the three mask topics.
    Bag(cmd_bag::Args),
}

fn main() -> std::process::ExitCode {
    // `--ros-args` is ROS 2's syntax, not clap's: taken out before clap sees the rest.
    let args: Vec<String> = std::env::args().collect();
    let (own, ros) = match segtool_ros2::ros_args::split(&args) {
        Ok(split) => split,
        Err(e) => {
            eprintln!("Error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match Cli::parse_from(own) {
        Cli::Node(a) => cmd_node::run(a, ros),
        Cli::Bag(a) => cmd_bag::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
