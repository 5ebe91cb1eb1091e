//! ROS 2 for segtool without a ROS 2 install: a live segmentation node on the DDS bus
//! ([`node`], ros2-client over RustDDS, which interoperates with the DDS implementations
//! ROS 2 ships), and bags in, bags out ([`bag`], foxglove's `mcap`).
//!
//! Both are thin skins over `segtool_runtime`: the node over a [`Segmenter`] and the
//! runtime's newest-frame stream, the bag converter over a [`Segmenter`] frame by frame.
//! The message types and their `.msg` texts live in [`msgs`]; camera messages become
//! images and masks become messages in [`frames`].
//!
//! [`Segmenter`]: segtool_runtime::Segmenter

pub mod bag;
pub mod diagnostics;
pub mod frames;
pub mod msgs;
pub mod node;
pub mod param_services;
pub mod params;
pub mod ros_args;
mod sequence;
