//! [`Size`]: an image size, height and width, with its two textual spellings.

use std::fmt;

/// An image size in pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Size {
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
}

impl Size {
    /// A size.
    pub fn new(height: u32, width: u32) -> Self {
        Self { height, width }
    }

    /// `HEIGHTxWIDTH` (e.g. `512x1024`), both positive.
    pub fn parse_hxw(s: &str) -> Result<Self, String> {
        let (h, w) = split(s).ok_or_else(|| {
            format!("`{s}`: expected HEIGHTxWIDTH with positive integers, e.g. 512x1024")
        })?;
        Ok(Self::new(h, w))
    }

    /// `WIDTHxHEIGHT` (e.g. `1920x1080`, ffmpeg's order), both positive.
    pub fn parse_wxh(s: &str) -> Result<Self, String> {
        let (w, h) = split(s).ok_or_else(|| {
            format!("`{s}`: expected WIDTHxHEIGHT with positive integers, e.g. 1920x1080")
        })?;
        Ok(Self::new(h, w))
    }

    /// `(height, width)` as usize, the order of NCHW shapes.
    pub fn hw(self) -> (usize, usize) {
        (self.height as usize, self.width as usize)
    }

    /// Number of pixels.
    pub fn pixels(self) -> u64 {
        u64::from(self.height) * u64::from(self.width)
    }
}

/// Shown as `HxW`.
impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.height, self.width)
    }
}

fn split(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(['x', 'X'])?;
    let p = |v: &str| v.trim().parse::<u32>().ok().filter(|v| *v > 0);
    Some((p(a)?, p(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_and_bad_input() {
        assert_eq!(Size::parse_hxw("512x1024").unwrap(), Size::new(512, 1024));
        assert_eq!(Size::parse_wxh("1920X1080").unwrap(), Size::new(1080, 1920));
        assert_eq!(Size::new(2, 3).to_string(), "2x3");
        for bad in ["", "512", "0x4", "4x-1", "ax4", "4x4x4"] {
            assert!(Size::parse_hxw(bad).is_err(), "{bad}");
        }
    }
}
