//! A card in TOML: the sidecar `M.segtool.toml` or a `--card FILE`. Every field is
//! optional (what the file leaves out, other sources or the graph fill in); an unknown
//! field is refused, naming it, so that a typo is not silently ignored.
//!
//! ```toml
//! classes = ["background", "person"]      # or: num_classes = 21
//! [input]
//! mean = [0.485, 0.456, 0.406]            # after scale; scale defaults to 1/255 here
//! std = [0.229, 0.224, 0.225]
//! channels = "rgb"                        # or "bgr"
//! size_divisor = 32                       # fit = "pad" (default) or "resize"
//! [output]
//! name = "out"
//! kind = "logits"                         # probabilities, class_map, binary (+ threshold)
//! ```

use std::path::Path;

use super::CardFields;
use crate::error::{Result, RuntimeError};

/// Reads the card file at `path`.
pub fn read(path: &Path) -> Result<CardFields> {
    let err = |message: String| RuntimeError::Card {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| err(format!("cannot read the card file: {e}")))?;
    parse(&text).map_err(err)
}

/// Parses a card's TOML text; the error names the field and line.
pub fn parse(text: &str) -> std::result::Result<CardFields, String> {
    toml::from_str(text).map_err(|e| format!("not a valid card: {}", e.to_string().trim()))
}
