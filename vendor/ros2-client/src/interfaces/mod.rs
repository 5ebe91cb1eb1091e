mod basic_types_interface;

pub use basic_types_interface::*;
