//! Where each camera's images come from and its outputs go: the one-camera names, the
//! per-camera namespaces of many cameras, and the lists refused by name.

use std::collections::HashMap;

use ros2_client::Name;

use super::{NodeConfig, NodeError, Transport};

/// One camera's topics, resolved: the topic it comes on, what the node subscribes and
/// where its outputs go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CameraTopics {
    /// The camera's image topic, resolved (its name in the diagnostics and the
    /// [`MultiStream`](segtool_runtime::batching::MultiStream)).
    pub camera: String,
    /// What the node subscribes: `camera`, or `camera/compressed`.
    pub input: String,
    /// `class_mask`, `color_mask` and `overlay`, resolved.
    pub outputs: [String; 3],
}

/// The namespace a camera topic lives in: the topic without its last name
/// (`/cam_front/image_raw` is in `/cam_front`; `/image` in `/`).
pub fn camera_namespace(topic: &str) -> &str {
    match topic.rfind('/') {
        Some(0) | None => "/",
        Some(at) => &topic[..at],
    }
}

fn checked_name(name: &str) -> Result<(), NodeError> {
    Name::parse(name).map(|_| ()).map_err(|e| NodeError::Name {
        name: name.into(),
        reason: format!("{e:?}"),
    })
}

/// Every camera's topics, or why the configuration cannot run.
///
/// - One camera (`image_topics` empty): the camera is [`Topics::input`](super::Topics::input) and the outputs
///   are [`Topics`](super::Topics)' names, each resolved in the node's namespace after remapping, as
///   ever (`image` and `class_mask` in `/seg`: `/seg/image`, `/seg/class_mask`).
/// - Several (`image_topics`): each entry resolved the same way is a camera; its outputs
///   go under `<camera namespace>/<node name>/`, the output names relative to that
///   (`/cam_front/image_raw` with node `segtool`: `/cam_front/segtool/class_mask`,
///   `/cam_front/segtool/color_mask`, `/cam_front/segtool/overlay`), and a remap of that
///   full name still applies. The output names must then be relative (an absolute one
///   would be every camera's), two entries may not name one topic, and two cameras may
///   not end up with one output topic (cameras in one namespace): each refused naming
///   the entries.
pub fn camera_topics(config: &NodeConfig) -> Result<Vec<CameraTopics>, NodeError> {
    let ros = &config.ros;
    let node = ros.node_name.clone().unwrap_or_else(|| config.name.clone());
    let input_of = |camera: &str| match config.transport {
        Transport::Raw => camera.to_string(),
        // image_transport's convention: the image topic plus `/compressed`.
        Transport::Compressed => format!("{camera}/compressed"),
    };
    let t = &config.topics;
    let names = [
        ("class_mask_topic", &t.class_mask),
        ("color_mask_topic", &t.color_mask),
        ("overlay_topic", &t.overlay),
    ];
    let cameras = if config.image_topics.is_empty() {
        let camera = ros.resolve(&node, &t.input);
        vec![CameraTopics {
            input: input_of(&camera),
            camera,
            outputs: names.map(|(_, n)| ros.resolve(&node, n)),
        }]
    } else {
        for (parameter, name) in names {
            if name.starts_with('/') || name.starts_with('~') || name.trim().is_empty() {
                return Err(NodeError::Parameter(format!(
                    "{parameter} {name:?}: with image_topics each camera publishes its own                      under its namespace, so the name must be relative (such as the default,                      {:?})",
                    match parameter {
                        "class_mask_topic" => "class_mask",
                        "color_mask_topic" => "color_mask",
                        _ => "overlay",
                    }
                )));
            }
        }
        let mut cameras: Vec<CameraTopics> = Vec::new();
        let mut first: HashMap<String, (usize, &str)> = HashMap::new();
        for (k, entry) in config.image_topics.iter().enumerate() {
            if entry.trim().is_empty() {
                return Err(NodeError::Parameter(format!(
                    "image_topics[{k}] is empty: each entry is a camera's image topic, such                      as /cam_front/image_raw"
                )));
            }
            let camera = ros.resolve(&node, entry);
            if let Some((j, earlier)) = first.get(&camera) {
                let how = match *earlier == entry.as_str() {
                    true => String::new(),
                    false => format!(" (as {earlier:?} and {entry:?})"),
                };
                return Err(NodeError::Parameter(format!(
                    "image_topics: {camera} is given twice{how}, entries {j} and {k}: each                      camera once"
                )));
            }
            first.insert(camera.clone(), (k, entry));
            let base = match camera_namespace(&camera) {
                "/" => format!("/{node}"),
                ns => format!("{ns}/{node}"),
            };
            cameras.push(CameraTopics {
                input: input_of(&camera),
                outputs: names.map(|(_, n)| ros.resolve(&node, &format!("{base}/{n}"))),
                camera,
            });
        }
        let mut owner: HashMap<&str, &str> = HashMap::new();
        for c in &cameras {
            for out in &c.outputs {
                if let Some(other) = owner.insert(out, &c.camera) {
                    return Err(NodeError::Parameter(format!(
                        "image_topics: {other} and {} would both publish {out} (outputs go                          to <camera namespace>/{node}/): give each camera a namespace of its                          own, such as /left/image_raw and /right/image_raw, or remap one                          camera's outputs",
                        c.camera
                    )));
                }
            }
        }
        cameras
    };
    for c in &cameras {
        checked_name(&c.input)?;
        for out in &c.outputs {
            checked_name(out)?;
        }
    }
    Ok(cameras)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(image_topics: &[&str], ros: &[&str]) -> NodeConfig {
        let mut args = vec!["--ros-args".to_string()];
        args.extend(ros.iter().map(|s| s.to_string()));
        let (_, ros) = crate::ros_args::split(&args).unwrap();
        NodeConfig {
            ros,
            image_topics: image_topics.iter().map(|s| s.to_string()).collect(),
            ..NodeConfig::default()
        }
    }

    fn error(config: &NodeConfig) -> String {
        camera_topics(config).unwrap_err().to_string()
    }

    #[test]
    fn one_camera_keeps_its_names() {
        let c = camera_topics(&config(
            &[],
            &["-r", "__ns:=/seg", "-r", "image:=/cam/image_raw"],
        ))
        .unwrap();
        assert_eq!(
            c,
            vec![CameraTopics {
                camera: "/cam/image_raw".into(),
                input: "/cam/image_raw".into(),
                outputs: [
                    "/seg/class_mask".into(),
                    "/seg/color_mask".into(),
                    "/seg/overlay".into()
                ],
            }]
        );
    }

    #[test]
    fn each_camera_publishes_in_its_own_namespace() {
        let mut cfg = config(
            &["/cam_front/image_raw", "rear/image_raw", "/image"],
            &[
                "-r",
                "__ns:=/robot",
                "-r",
                "__node:=seg",
                "-r",
                "/cam_front/seg/overlay:=/front_overlay",
            ],
        );
        cfg.transport = Transport::Compressed;
        let c = camera_topics(&cfg).unwrap();
        let names: Vec<(&str, &str, [&str; 3])> = c
            .iter()
            .map(|c| {
                (
                    c.camera.as_str(),
                    c.input.as_str(),
                    c.outputs.each_ref().map(String::as_str),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                (
                    "/cam_front/image_raw",
                    "/cam_front/image_raw/compressed",
                    [
                        "/cam_front/seg/class_mask",
                        "/cam_front/seg/color_mask",
                        // a remap of the full name applies
                        "/front_overlay"
                    ]
                ),
                (
                    "/robot/rear/image_raw",
                    "/robot/rear/image_raw/compressed",
                    [
                        "/robot/rear/seg/class_mask",
                        "/robot/rear/seg/color_mask",
                        "/robot/rear/seg/overlay"
                    ]
                ),
                (
                    "/image",
                    "/image/compressed",
                    ["/seg/class_mask", "/seg/color_mask", "/seg/overlay"]
                ),
            ]
        );
        // Output names relative to the camera's namespace.
        let mut cfg = config(&["/a/image", "/b/image"], &[]);
        cfg.topics.class_mask = "masks/ids".into();
        let c = camera_topics(&cfg).unwrap();
        assert_eq!(c[1].outputs[0], "/b/segtool/masks/ids");
    }

    #[test]
    fn bad_camera_lists_are_refused_by_name() {
        // The same topic twice, as written or after resolving.
        let e = error(&config(&["/cam/image", "/other/image", "/cam/image"], &[]));
        assert!(
            e.contains("/cam/image is given twice") && e.contains("0 and 2"),
            "{e}"
        );
        let e = error(&config(&["image", "/seg/image"], &["-r", "__ns:=/seg"]));
        assert!(
            e.contains("/seg/image is given twice") && e.contains("\"image\""),
            "{e}"
        );
        let e = error(&config(&["/cam/image", " "], &[]));
        assert!(e.contains("image_topics[1] is empty"), "{e}");
        // Two cameras in one namespace would share their outputs.
        let e = error(&config(&["/cam/left", "/cam/right"], &[]));
        assert!(
            e.contains("/cam/left and /cam/right would both publish /cam/segtool/class_mask"),
            "{e}"
        );
        // An absolute output name would be every camera's.
        let mut cfg = config(&["/a/image", "/b/image"], &[]);
        cfg.topics.color_mask = "/colors".into();
        let e = error(&cfg);
        assert!(
            e.contains("color_mask_topic \"/colors\"") && e.contains("relative"),
            "{e}"
        );
        // Not a topic name at all.
        let e = error(&config(&["/a/image", "/b/9 image"], &[]));
        assert!(e.contains("9 image"), "{e}");
    }

    #[test]
    fn camera_namespaces() {
        assert_eq!(camera_namespace("/cam_front/image_raw"), "/cam_front");
        assert_eq!(camera_namespace("/a/b/image"), "/a/b");
        assert_eq!(camera_namespace("/image"), "/");
    }
}
