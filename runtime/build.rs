//! Records where the setup script found libonnxruntime (`SEGTOOL_ORT_DYLIB`), which
//! `ort_engine` reads with `option_env!`: rebuild when it changes so a stale path is never
//! baked in.
fn main() {
    println!("cargo:rerun-if-env-changed=SEGTOOL_ORT_DYLIB");
    println!("cargo:rerun-if-changed=build.rs");
}
