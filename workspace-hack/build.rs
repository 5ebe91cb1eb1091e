// Cargo builds a package's build-dependencies only when it has a build script; this one's
// build-dependencies give host units (build scripts, proc-macros) the same features as
// target units, so that cargo compiles each such crate once.
fn main() {}
