//! ROS 2's own command-line syntax after `--ros-args`, and name resolution as `rcl` does
//! it, for a node that has no ROS 2 install to do it.
//!
//! Accepts `-r FROM:=TO` / `--remap` (topic remaps; `__ns:=/ns` and `__node:=name`),
//! `-p NAME:=VALUE` / `--param` and `--params-file FILE` (read by [`crate::params`]), and
//! ignores `--log-level LEVEL` and `--enclave E` with a note (they configure parts this
//! node does not have).
//! `--ros-args` ends at `--`. Refuses anything else, naming it. A relative topic name
//! resolves under the node's namespace (`image` in `/seg` is `/seg/image`), an absolute
//! one stays; `~/x` is `/ns/node/x`; a remap matches the name as written or resolved.

use std::collections::BTreeMap;

/// What `--ros-args` said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RosArgs {
    /// Topic remaps, in order (the first that matches wins, as in rcl).
    pub remaps: Vec<(String, String)>,
    /// `__ns:=` (absolute).
    pub namespace: Option<String>,
    /// `__node:=`.
    pub node_name: Option<String>,
    /// `-p name:=value`, as written.
    pub params: BTreeMap<String, String>,
    /// `--params-file FILE`, in order.
    pub params_files: Vec<std::path::PathBuf>,
    /// Arguments accepted but without effect here, for a note.
    pub ignored: Vec<String>,
}

/// Splits `args` at `--ros-args` (up to `--` or the end): the program's own arguments and
/// the ROS arguments.
pub fn split(args: &[String]) -> Result<(Vec<String>, RosArgs), String> {
    let mut own = Vec::new();
    let mut ros = RosArgs::default();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        if a != "--ros-args" {
            own.push(a.clone());
            continue;
        }
        while let Some(a) = it.next() {
            let mut value = |flag: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("--ros-args: {flag} needs a value"))
            };
            match a.as_str() {
                "--" => break,
                "--ros-args" => {}
                "-r" | "--remap" => {
                    let v = value(a)?;
                    let (from, to) = assignment(&v, a)?;
                    match from.as_str() {
                        "__ns" => ros.namespace = Some(absolute_namespace(&to)?),
                        "__node" | "__name" => ros.node_name = Some(to),
                        _ => ros.remaps.push((from, to)),
                    }
                }
                "-p" | "--param" => {
                    let v = value(a)?;
                    let (name, val) = assignment(&v, a)?;
                    ros.params.insert(name, val);
                }
                "--params-file" => ros.params_files.push(value(a)?.into()),
                "--log-level" | "--enclave" => {
                    let v = value(a)?;
                    ros.ignored.push(format!("{a} {v}"));
                }
                "-e" => ros.ignored.push(format!("-e {}", value(a)?)),
                other => return Err(format!("--ros-args: {other:?} is not understood (-r, -p)")),
            }
        }
    }
    Ok((own, ros))
}

fn assignment(v: &str, flag: &str) -> Result<(String, String), String> {
    v.split_once(":=")
        .filter(|(a, b)| !a.is_empty() && !b.is_empty())
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| format!("--ros-args {flag} {v:?}: expected NAME:=VALUE"))
}

fn absolute_namespace(ns: &str) -> Result<String, String> {
    let ns = if ns.starts_with('/') {
        ns.to_string()
    } else {
        format!("/{ns}")
    };
    let trimmed = ns.trim_end_matches('/');
    Ok(if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.into()
    })
}

impl RosArgs {
    /// The node's fully qualified name (`/ns/name`), `name` unless `__node:=` renames it.
    pub fn full_name(&self, name: &str) -> String {
        let name = self.node_name.as_deref().unwrap_or(name);
        match self.namespace() {
            "/" => format!("/{name}"),
            ns => format!("{ns}/{name}"),
        }
    }

    /// The node's namespace (`/` by default).
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("/")
    }

    /// The fully qualified name of topic `name` (as the node's code writes it) after
    /// remapping.
    pub fn resolve(&self, node: &str, name: &str) -> String {
        let expanded = expand(self.namespace(), node, name);
        for (from, to) in &self.remaps {
            if from == name || expand(self.namespace(), node, from) == expanded {
                return expand(self.namespace(), node, to);
            }
        }
        expanded
    }
}

/// `name` made absolute in `ns` for node `node`.
fn expand(ns: &str, node: &str, name: &str) -> String {
    let join = |a: &str, b: &str| {
        if a == "/" {
            format!("/{b}")
        } else {
            format!("{a}/{b}")
        }
    };
    if let Some(abs) = name.strip_prefix('/') {
        format!("/{abs}")
    } else if let Some(private) = name.strip_prefix("~/") {
        join(&join(ns, node), private)
    } else {
        join(ns, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ros_args_remap_rename_and_set_parameters() {
        let (own, ros) = split(&strings(&[
            "--model",
            "m.onnx",
            "--ros-args",
            "-r",
            "image:=/cam/image_raw",
            "-r",
            "__ns:=/seg",
            "-r",
            "__node:=segmenter",
            "-p",
            "model:=other.onnx",
            "--log-level",
            "info",
            "--",
            "--reliable",
        ]))
        .unwrap();
        assert_eq!(own, strings(&["--model", "m.onnx", "--reliable"]));
        assert_eq!(ros.namespace(), "/seg");
        assert_eq!(ros.node_name.as_deref(), Some("segmenter"));
        assert_eq!(ros.params["model"], "other.onnx");
        assert_eq!(ros.resolve("segmenter", "image"), "/cam/image_raw");
        assert_eq!(ros.resolve("segmenter", "class_mask"), "/seg/class_mask");
        assert_eq!(ros.resolve("segmenter", "/diagnostics"), "/diagnostics");
        assert_eq!(ros.resolve("segmenter", "~/state"), "/seg/segmenter/state");
        assert!(split(&strings(&["--ros-args", "-x"]))
            .unwrap_err()
            .contains("-x"));
        assert!(split(&strings(&["--ros-args", "-r", "image"]))
            .unwrap_err()
            .contains(":="));
    }

    #[test]
    fn a_remap_matches_the_resolved_name_too() {
        let (_, ros) = split(&strings(&[
            "--ros-args",
            "-r",
            "__ns:=/a",
            "-r",
            "/a/image:=raw",
        ]))
        .unwrap();
        assert_eq!(ros.resolve("n", "image"), "/a/raw");
    }
}
