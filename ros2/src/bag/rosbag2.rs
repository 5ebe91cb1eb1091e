//! rosbag2 folders: which files make the bag, and the advice for what is refused.
//!
//! `metadata.yaml` is read for three keys only (`storage_identifier`, `compression_mode`,
//! `relative_file_paths`) by a line reader that knows the layout rosbag2 and rosbags
//! write: block or flow lists, plain or quoted scalars, `#` comments. A folder without it
//! is read as its `.mcap` files in name order, numbers compared as numbers.

use std::path::{Path, PathBuf};

use super::BagError;

/// A rosbag2 folder's files: `metadata.yaml`'s, else its `.mcap` files by name.
pub(super) fn folder_files(dir: &Path) -> Result<Vec<PathBuf>, BagError> {
    let metadata = dir.join("metadata.yaml");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BagError::Io { path, source }
    };
    if metadata.is_file() {
        let text = std::fs::read_to_string(&metadata).map_err(io(&metadata))?;
        let storage = yaml_scalar(&text, "storage_identifier").unwrap_or_default();
        if storage == "sqlite3" {
            return Err(sqlite(dir));
        }
        if !storage.is_empty() && storage != "mcap" {
            return Err(BagError::Unsupported {
                path: metadata,
                reason: format!("storage_identifier {storage:?}: only mcap bags are read"),
            });
        }
        let compression = yaml_scalar(&text, "compression_mode").unwrap_or_default();
        if !compression.is_empty() && !compression.eq_ignore_ascii_case("none") {
            return Err(BagError::Unsupported {
                path: metadata,
                reason: format!(
                    "compression_mode {compression}: the bag is compressed per file or per \
                     message; write an uncompressed copy first (`ros2 bag convert`, with \
                     chunk compression in a storage_config_uri if wanted)"
                ),
            });
        }
        let files: Vec<PathBuf> = yaml_list(&text, "relative_file_paths")
            .into_iter()
            .map(|rel| {
                // Some rosbag2 releases wrote the paths with the folder's name in front.
                let inside = dir.join(&rel);
                match dir.parent().map(|p| p.join(&rel)) {
                    Some(beside) if !inside.exists() && beside.is_file() => beside,
                    _ => inside,
                }
            })
            .collect();
        if files.is_empty() {
            return Err(BagError::Unsupported {
                path: metadata,
                reason: "no relative_file_paths: not a rosbag2 metadata file".into(),
            });
        }
        if let Some(missing) = files.iter().find(|f| !f.is_file()) {
            return Err(BagError::Missing(missing.clone()));
        }
        return Ok(files);
    }
    let mut mcaps = Vec::new();
    let mut db3 = false;
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("mcap") => mcaps.push(path),
            Some("db3") => db3 = true,
            _ => {}
        }
    }
    if mcaps.is_empty() {
        if db3 {
            return Err(sqlite(dir));
        }
        return Err(BagError::Unsupported {
            path: dir.to_path_buf(),
            reason: "not a rosbag2 folder: no metadata.yaml and no .mcap file".into(),
        });
    }
    mcaps.sort_by_key(|p| natural_key(p));
    Ok(mcaps)
}

/// `bag_10.mcap` after `bag_9.mcap`: the name with its last number compared as a number.
fn natural_key(path: &Path) -> (String, u64, String) {
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let stem = name.strip_suffix(".mcap").unwrap_or(&name);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, number) = stem.split_at(stem.len() - digits);
    (head.to_string(), number.parse().unwrap_or(0), name.clone())
}

pub(super) fn sqlite(bag: &Path) -> BagError {
    let stem = bag
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bag".into());
    let mcap = bag.with_file_name(format!("{stem}_mcap"));
    BagError::Sqlite {
        path: bag.to_path_buf(),
        bag: shell_word(bag),
        mcap: shell_word(&mcap),
    }
}

/// `path` as one shell word, quoted when it has to be (the advice is pasted as is).
fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The scalar value of `key:` anywhere in `text` (first occurrence), unquoted.
fn yaml_scalar(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(key)?.strip_prefix(':')?;
        Some(unquote(strip_comment(rest)))
    })
}

/// The list under `key:`: a flow list on the same line (`[a, b]`) or the `- item` lines
/// that follow it.
fn yaml_list(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines();
    let Some((indent, rest)) = lines.by_ref().find_map(|line| {
        let trimmed = line.trim_start();
        let rest = trimmed.strip_prefix(key)?.strip_prefix(':')?;
        Some((line.len() - trimmed.len(), strip_comment(rest)))
    }) else {
        return Vec::new();
    };
    if let Some(flow) = rest.strip_prefix('[') {
        let inner = flow.trim_end().trim_end_matches(']');
        return inner
            .split(',')
            .map(unquote)
            .filter(|s| !s.is_empty())
            .collect();
    }
    let mut items = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let line_indent = line.len() - trimmed.len();
        match trimmed.strip_prefix('-') {
            // A sequence may sit at its key's indentation (rosbag2 writes it so).
            Some(item) if line_indent >= indent => items.push(unquote(strip_comment(item))),
            _ => break,
        }
    }
    items
}

fn strip_comment(s: &str) -> &str {
    // Only ` #` starts a comment (a `#` inside a name does not).
    s.find(" #").map_or(s, |i| &s[..i]).trim()
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `ros2 bag record` (Humble) writes it, split in two files.
    const ROSBAG2_METADATA: &str = r#"rosbag2_bagfile_information:
  version: 5
  storage_identifier: mcap
  duration:
    nanoseconds: 4000000000
  topics_with_message_count:
    - topic_metadata:
        name: /cam/image_raw
        type: sensor_msgs/msg/Image
        serialization_format: cdr
        offered_qos_profiles: "- history: 3\n  depth: 0\n  reliability: 1\n"
      message_count: 120
  compression_format: ""
  compression_mode: ""
  relative_file_paths:
    - rosbag2_2024_01_01-00_00_00_0.mcap
    - 'rosbag2_2024_01_01-00_00_00_1.mcap'
  files:
    - path: rosbag2_2024_01_01-00_00_00_0.mcap
"#;

    #[test]
    fn reads_the_three_keys_of_a_rosbag2_metadata_file() {
        assert_eq!(
            yaml_scalar(ROSBAG2_METADATA, "storage_identifier").as_deref(),
            Some("mcap")
        );
        assert_eq!(
            yaml_scalar(ROSBAG2_METADATA, "compression_mode").as_deref(),
            Some("")
        );
        assert_eq!(
            yaml_list(ROSBAG2_METADATA, "relative_file_paths"),
            [
                "rosbag2_2024_01_01-00_00_00_0.mcap",
                "rosbag2_2024_01_01-00_00_00_1.mcap"
            ]
        );
        let flow = "a:\n  relative_file_paths: [x_0.mcap, \"x_1.mcap\"]  # two\n";
        assert_eq!(
            yaml_list(flow, "relative_file_paths"),
            ["x_0.mcap", "x_1.mcap"]
        );
        let same_indent = "relative_file_paths:\n- a.mcap\n- b.mcap\nfiles:\n- path: a.mcap\n";
        assert_eq!(
            yaml_list(same_indent, "relative_file_paths"),
            ["a.mcap", "b.mcap"]
        );
    }

    #[test]
    fn advice_paths_paste_into_a_shell() {
        assert_eq!(shell_word(Path::new("/data/run_1/bag")), "/data/run_1/bag");
        assert_eq!(shell_word(Path::new("my bag's")), "'my bag'\\''s'");
    }

    #[test]
    fn split_files_sort_by_their_number() {
        let mut names: Vec<PathBuf> = ["b_10.mcap", "b_9.mcap", "b_0.mcap"]
            .map(PathBuf::from)
            .into();
        names.sort_by_key(|p| natural_key(p));
        assert_eq!(
            names,
            ["b_0.mcap", "b_9.mcap", "b_10.mcap"].map(PathBuf::from)
        );
    }
}
