//! The node's parameters as `rcl` reads them: each declared with its type, whether it may
//! change while the node runs, and what it does; their values from `--params-file` YAML
//! files, then `-p NAME:=VALUE`, later ones winning (a launch file's
//! `parameters=[config.yaml, {...}]` arrives as exactly that).
//!
//! A file's `ros__parameters` apply under the node's full name (`/ns/node`), its plain
//! name (`node`) or the wildcards `/**` and `/**/node`, in the file's order; sections for
//! other nodes are skipped, and a key beside `ros__parameters` under ours is an error.
//! Values are YAML as `rcl` parses them (a `-p` value too):
//! `true`, `3`, `0.5`, `[cuda, cpu]`, strings otherwise. An integer is taken for a
//! double. An undeclared name, or a value of another type, is an error naming the file,
//! the key and the expected type: nothing is silently ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

/// A parameter's type, as `rcl_interfaces/msg/ParameterType` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Integer,
    Double,
    String,
    StringArray,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Bool => "bool",
            Kind::Integer => "integer",
            Kind::Double => "double",
            Kind::String => "string",
            Kind::StringArray => "string array",
        })
    }
}

/// A parameter's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    Integer(i64),
    Double(f64),
    String(String),
    StringArray(Vec<String>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Integer(i) => write!(f, "{i}"),
            Value::Double(d) => write!(f, "{d}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::StringArray(v) => write!(f, "{v:?}"),
        }
    }
}

/// One declared parameter.
pub struct Declared {
    pub name: &'static str,
    pub kind: Kind,
    /// Changeable only by restarting the node (a model, a topic, a QoS).
    pub read_only: bool,
    pub description: &'static str,
}

const fn declared(
    name: &'static str,
    kind: Kind,
    read_only: bool,
    description: &'static str,
) -> Declared {
    Declared {
        name,
        kind,
        read_only,
        description,
    }
}

/// Every parameter the node declares, in the order `ros2 param list` shows them.
pub const DECLARED: [Declared; 22] = [
    declared(
        "model",
        Kind::String,
        true,
        "The model: a segtool export, or a file or folder from elsewhere with its model card",
    ),
    declared(
        "card",
        Kind::String,
        true,
        "A model card (TOML) for a file segtool did not write",
    ),
    declared("engine", Kind::String, true, "auto, ort, tract or openvino"),
    declared(
        "providers",
        Kind::StringArray,
        true,
        "ONNX Runtime's execution providers in preference order, e.g. [cuda, cpu]",
    ),
    declared(
        "device",
        Kind::String,
        true,
        "OpenVINO's device: CPU, GPU, NPU or AUTO",
    ),
    declared(
        "precision",
        Kind::String,
        true,
        "OpenVINO's precision for float32 layers: f32 or bf16",
    ),
    declared(
        "hint",
        Kind::String,
        true,
        "OpenVINO's performance hint: latency or throughput",
    ),
    declared(
        "streams",
        Kind::Integer,
        true,
        "OpenVINO's parallel inference streams (0: what the hint picks)",
    ),
    declared(
        "threads",
        Kind::Integer,
        true,
        "Engine threads (0: the engine's choice)",
    ),
    declared(
        "fixed_size",
        Kind::String,
        true,
        "HxW every camera frame has (ONNX Runtime plans its memory for it); empty: any size",
    ),
    declared(
        "strict",
        Kind::Bool,
        true,
        "No fallback of any kind: an engine, provider, device or option not as asked is an error",
    ),
    declared(
        "transport",
        Kind::String,
        true,
        "raw (sensor_msgs/Image) or compressed (CompressedImage on <input_topic>/compressed)",
    ),
    declared(
        "reliable",
        Kind::Bool,
        true,
        "Reliable QoS for the camera and the masks (default: sensor data, best effort)",
    ),
    declared("input_topic", Kind::String, true, "The camera topic"),
    declared(
        "image_topics",
        Kind::StringArray,
        true,
        "Several camera topics, one model for all: each camera's outputs in <its namespace>/<node name>/ (empty: the one input_topic)",
    ),
    declared(
        "class_mask_topic",
        Kind::String,
        true,
        "The class ids (mono8 or mono16), always published",
    ),
    declared(
        "color_mask_topic",
        Kind::String,
        true,
        "The palette mask (rgb8)",
    ),
    declared(
        "overlay_topic",
        Kind::String,
        true,
        "The frame with the palette mask blended in (rgb8)",
    ),
    declared(
        "publish_color_mask",
        Kind::Bool,
        false,
        "Publish the colour mask (drawn only while someone subscribes)",
    ),
    declared(
        "publish_overlay",
        Kind::Bool,
        false,
        "Publish the overlay (drawn only while someone subscribes)",
    ),
    declared(
        "alpha",
        Kind::Double,
        false,
        "Opacity of the mask in the overlay, 0 to 1",
    ),
    declared(
        "diagnostics_period",
        Kind::Double,
        false,
        "Seconds between /diagnostics messages",
    ),
];

/// The declaration of `name`, if it is one.
pub fn declaration(name: &str) -> Option<&'static Declared> {
    DECLARED.iter().find(|d| d.name == name)
}

/// Values given, by name (declared names only, each of its type).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Given(pub BTreeMap<String, Value>);

impl Given {
    pub fn string(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.0.get(name) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    pub fn integer(&self, name: &str) -> Option<i64> {
        match self.0.get(name) {
            Some(Value::Integer(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn double(&self, name: &str) -> Option<f64> {
        match self.0.get(name) {
            Some(Value::Double(d)) => Some(*d),
            _ => None,
        }
    }

    pub fn strings(&self, name: &str) -> Option<&[String]> {
        match self.0.get(name) {
            Some(Value::StringArray(v)) => Some(v),
            _ => None,
        }
    }
}

/// `value` as parameter `name` takes it, or why not (`place` says where it was given).
pub fn typed(name: &str, value: &Yaml, place: &str) -> Result<Value, String> {
    let Some(d) = declaration(name) else {
        let known: Vec<&str> = DECLARED.iter().map(|d| d.name).collect();
        return Err(format!(
            "{place}: {name}: not a parameter of this node (declared: {})",
            known.join(", ")
        ));
    };
    let wrong = || {
        format!(
            "{place}: {name}: expected {}, got {}",
            d.kind,
            describe(value)
        )
    };
    Ok(match (d.kind, value) {
        (Kind::Bool, Yaml::Boolean(b)) => Value::Bool(*b),
        (Kind::Integer, Yaml::Integer(i)) => Value::Integer(*i),
        (Kind::Double, Yaml::Integer(i)) => Value::Double(*i as f64),
        (Kind::Double, Yaml::Real(_)) => Value::Double(value.as_f64().ok_or_else(wrong)?),
        (Kind::String, Yaml::String(s)) => Value::String(s.clone()),
        (Kind::StringArray, Yaml::Array(items)) => Value::StringArray(
            items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(wrong)?,
        ),
        // One name for a list of one, as rcl's `-p providers:=cpu` is written too.
        (Kind::StringArray, Yaml::String(s)) => Value::StringArray(vec![s.clone()]),
        _ => return Err(wrong()),
    })
}

fn describe(value: &Yaml) -> String {
    match value {
        Yaml::Boolean(b) => format!("bool {b}"),
        Yaml::Integer(i) => format!("integer {i}"),
        Yaml::Real(r) => format!("double {r}"),
        Yaml::String(s) => format!("string {s:?}"),
        Yaml::Array(_) => "an array".into(),
        Yaml::Hash(_) => "a mapping".into(),
        Yaml::Null => "nothing".into(),
        _ => "an unsupported value".into(),
    }
}

/// One `-p NAME:=VALUE` (the value parsed as YAML, as rcl does).
pub fn override_value(name: &str, text: &str) -> Result<Value, String> {
    let docs = YamlLoader::load_from_str(text)
        .map_err(|e| format!("-p {name}:={text}: not a YAML value: {e}"))?;
    let value = docs.into_iter().next().unwrap_or(Yaml::Null);
    typed(name, &value, &format!("-p {name}:={text}"))
}

/// The parameters of one `--params-file` for the node `full_name` (`/ns/node`).
pub fn read_file(path: &Path, full_name: &str) -> Result<Vec<(String, Value)>, String> {
    let place = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{place}: {e}"))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| format!("{place}: not YAML: {e}"))?;
    let plain = full_name.rsplit('/').next().unwrap_or(full_name);
    let mut out = Vec::new();
    for doc in &docs {
        let Yaml::Hash(nodes) = doc else {
            return Err(format!("{place}: expected node names at the top level"));
        };
        for (node, section) in nodes {
            let node = node.as_str().unwrap_or_default();
            let ours = node == full_name
                || node == plain
                || node == "/**"
                || node == format!("/**/{plain}");
            if !ours {
                continue;
            }
            let Yaml::Hash(keys) = section else {
                return Err(format!(
                    "{place}: {node}: expected a ros__parameters mapping"
                ));
            };
            // rcl reads nothing else under a node's name: say so rather than skip it.
            if let Some(other) = keys.keys().find(|k| k.as_str() != Some("ros__parameters")) {
                return Err(format!(
                    "{place}: {node}: {}: only ros__parameters is read under a node's name",
                    describe(other)
                ));
            }
            let Yaml::Hash(params) = &section["ros__parameters"] else {
                return Err(format!(
                    "{place}: {node}: expected a ros__parameters mapping"
                ));
            };
            for (key, value) in params {
                let key = key.as_str().unwrap_or_default().to_string();
                let value = typed(&key, value, &format!("{place}: {node}"))?;
                out.push((key, value));
            }
        }
    }
    Ok(out)
}

/// Every value given: the files in order, then the `-p` overrides (later ones win).
pub fn gather(
    files: &[PathBuf],
    overrides: &BTreeMap<String, String>,
    full_name: &str,
) -> Result<Given, String> {
    let mut given = Given::default();
    for file in files {
        for (key, value) in read_file(file, full_name)? {
            given.0.insert(key, value);
        }
    }
    for (name, text) in overrides {
        given.0.insert(name.clone(), override_value(name, text)?);
    }
    Ok(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("params.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_file_applies_under_the_full_name_the_plain_name_and_the_wildcards() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "/**:\n  ros__parameters:\n    alpha: 0.25\n    threads: 2\n\
             /other/node:\n  ros__parameters:\n    model: nope.onnx\n\
             segtool:\n  ros__parameters:\n    engine: tract\n    providers: [cuda, cpu]\n\
             /seg/segtool:\n  ros__parameters:\n    model: m.onnx\n    alpha: 1\n",
        );
        let mut overrides = BTreeMap::new();
        overrides.insert("threads".to_string(), "1".to_string());
        let given = gather(&[file], &overrides, "/seg/segtool").unwrap();
        assert_eq!(given.string("model"), Some("m.onnx"));
        assert_eq!(given.string("engine"), Some("tract"));
        assert_eq!(
            given.strings("providers"),
            Some(&["cuda".to_string(), "cpu".to_string()][..])
        );
        // The later section wins, an integer is taken for a double, and -p beats the file.
        assert_eq!(given.double("alpha"), Some(1.0));
        assert_eq!(given.integer("threads"), Some(1));
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors_naming_file_key_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "/**:\n  ros__parameters:\n    modle: m.onnx\n");
        let e = gather(&[file.clone()], &BTreeMap::new(), "/segtool").unwrap_err();
        assert!(
            e.contains("params.yaml") && e.contains("modle") && e.contains("model"),
            "{e}"
        );
        let file = write(
            dir.path(),
            "segtool:\n  ros__parameters:\n    threads: two\n",
        );
        let e = gather(&[file], &BTreeMap::new(), "/segtool").unwrap_err();
        assert!(
            e.contains("threads: expected integer, got string \"two\""),
            "{e}"
        );
        let file = write(dir.path(), "segtool:\n  ros_parameters:\n    threads: 2\n");
        let e = gather(&[file], &BTreeMap::new(), "/segtool").unwrap_err();
        assert!(
            e.contains("ros_parameters") && e.contains("only ros__parameters"),
            "{e}"
        );
        let e = override_value("reliable", "maybe").unwrap_err();
        assert!(
            e.contains("-p reliable:=maybe") && e.contains("expected bool"),
            "{e}"
        );
        assert_eq!(
            override_value("reliable", "true").unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            override_value("providers", "cpu").unwrap(),
            Value::StringArray(vec!["cpu".into()])
        );
    }
}
