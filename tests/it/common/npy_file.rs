//! `.npy` files as numpy writes them (format version 1): the shape, the header (for the
//! dtype) and the raw data. One reader for the binary's tests (`tests/common`) and the
//! ROS 2 crate's (`ros2/tests`, which include this file by path).

use std::path::Path;

/// An array read back: its shape, its header text (`'descr': '<f4'`, `'|u1'`...) and its
/// bytes as stored.
pub struct NpyFile {
    pub shape: Vec<usize>,
    pub header: String,
    pub data: Vec<u8>,
}

pub fn read(path: &Path) -> NpyFile {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{}", path.display());
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    let shape = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .filter_map(|d| d.trim().parse().ok())
        .collect();
    NpyFile {
        shape,
        header: header.to_string(),
        data: bytes[10 + header_len..].to_vec(),
    }
}
