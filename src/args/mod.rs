//! Argument types shared by several subcommands, so that no subcommand module imports
//! another: each turns flags into library builders through these.

pub mod engine;
pub mod size;
