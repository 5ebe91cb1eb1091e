//! Class names and colours of a dataset folder, from `classes.json` (what `segtool
//! generate` writes) or `classes.txt` (what people write by hand).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::DatasetError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassesFile {
    pub classes: Vec<String>,
    #[serde(default)]
    pub palette: Option<Vec<[u8; 3]>>,
}

impl ClassesFile {
    /// Reads a classes file: `.txt` files as one class per line, anything else as JSON
    /// `{"classes": [...], "palette": [[r,g,b], ...]}`.
    pub fn read(path: &Path) -> Result<Self, DatasetError> {
        let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io {
            path: path.into(),
            source,
        })?;
        let is_txt = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("txt"));
        let file = if is_txt {
            Self::parse_txt(&text).map_err(|message| DatasetError::Classes {
                path: path.into(),
                message,
            })?
        } else {
            serde_json::from_str(&text).map_err(|e| DatasetError::Classes {
                path: path.into(),
                message: e.to_string(),
            })?
        };
        file.validate().map_err(|message| DatasetError::Classes {
            path: path.into(),
            message,
        })?;
        Ok(file)
    }

    /// The classes of dataset folder `root`: `classes.json` if present, else
    /// `classes.txt`, else `None`.
    pub fn find(root: &Path) -> Result<Option<Self>, DatasetError> {
        for name in ["classes.json", "classes.txt"] {
            let path = root.join(name);
            if path.is_file() {
                return Self::read(&path).map(Some);
            }
        }
        Ok(None)
    }

    /// Parses `classes.txt`: one class per line, either `name` or `name r g b` (names
    /// may contain spaces, so the colour is the last three fields when they are all
    /// bytes). Blank lines and lines starting with `#` are skipped. Colours are all or
    /// nothing: a palette with holes would silently colour some classes black.
    fn parse_txt(text: &str) -> Result<Self, String> {
        let mut classes = Vec::new();
        let mut colours = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let colour = match fields.len() {
                n if n >= 4 => {
                    let rgb: Vec<u8> = fields[n - 3..]
                        .iter()
                        .filter_map(|f| f.parse().ok())
                        .collect();
                    (rgb.len() == 3).then(|| [rgb[0], rgb[1], rgb[2]])
                }
                _ => None,
            };
            let name = match colour {
                Some(_) => fields[..fields.len() - 3].join(" "),
                None => fields.join(" "),
            };
            classes.push(name);
            colours.push((number + 1, colour));
        }
        let with_colour = colours.iter().filter(|(_, c)| c.is_some()).count();
        let palette = if with_colour == 0 {
            None
        } else if with_colour == colours.len() {
            Some(colours.iter().filter_map(|(_, c)| *c).collect())
        } else {
            let (line, _) = colours.iter().find(|(_, c)| c.is_none()).unwrap();
            return Err(format!(
                "line {line} has no colour but other lines do (write `name r g b` on every line or on none)"
            ));
        };
        Ok(Self { classes, palette })
    }

    fn validate(&self) -> Result<(), String> {
        if self.classes.is_empty() {
            return Err("no classes".into());
        }
        // 255 is the ignore label, so at most 255 classes fit in a u8 mask.
        if self.classes.len() > 255 {
            return Err(format!("{} classes; at most 255 fit", self.classes.len()));
        }
        if let Some(p) = &self.palette {
            if p.len() != self.classes.len() {
                return Err(format!(
                    "{} classes but {} palette colours",
                    self.classes.len(),
                    p.len()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_names_with_and_without_colours() {
        let file = ClassesFile::parse_txt("# comment\nroad\n\ntraffic light\n").unwrap();
        assert_eq!(file.classes, ["road", "traffic light"]);
        assert_eq!(file.palette, None);

        let file = ClassesFile::parse_txt("road 128 64 128\ntraffic light 250 170 30\n").unwrap();
        assert_eq!(file.classes, ["road", "traffic light"]);
        assert_eq!(file.palette, Some(vec![[128, 64, 128], [250, 170, 30]]));

        // "route 66" is a name, not a half-written colour.
        let file = ClassesFile::parse_txt("route 66\nsky\n").unwrap();
        assert_eq!(file.classes, ["route 66", "sky"]);
    }

    #[test]
    fn txt_partial_palette_is_an_error() {
        let err = ClassesFile::parse_txt("road 1 2 3\nsky\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn find_prefers_json_then_txt() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(ClassesFile::find(tmp.path()).unwrap(), None);
        std::fs::write(tmp.path().join("classes.txt"), "a\nb\n").unwrap();
        assert_eq!(
            ClassesFile::find(tmp.path()).unwrap().unwrap().classes,
            ["a", "b"]
        );
        std::fs::write(tmp.path().join("classes.json"), r#"{"classes": ["x"]}"#).unwrap();
        assert_eq!(
            ClassesFile::find(tmp.path()).unwrap().unwrap().classes,
            ["x"]
        );
        std::fs::write(tmp.path().join("classes.json"), r#"{"classes": []}"#).unwrap();
        let err = ClassesFile::find(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("classes.json") && err.contains("no classes"),
            "{err}"
        );
    }
}
