//! The JSON reading the folder conventions share: a file's value, its error naming the
//! file; a list of numbers, its error naming the key.

use std::path::Path;

use serde_json::Value;

use crate::error::{Result, RuntimeError};

/// The JSON value of the file at `path`.
pub fn read_json(path: &Path) -> Result<Value> {
    let err = |message: String| RuntimeError::Card {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))
}

/// `v[key]` as a list of numbers.
pub fn floats(v: &Value, key: &str) -> std::result::Result<Vec<f32>, String> {
    let list = v
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{key} is missing"))?;
    list.iter()
        .map(|x| {
            x.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| format!("{key} holds {x}, not a number"))
        })
        .collect()
}
