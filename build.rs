//! Gives the `segtool` binary (and this package's tests) an rpath to libtorch's lib
//! folder, so it runs without LD_LIBRARY_PATH. torch-sys reports that folder to its
//! direct dependents as DEP_TCH_LIBTORCH_LIB; segtool-train reports libnccl's folder
//! (its c10d shim links NCCL) as DEP_SEGTOOL_C10D_RPATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // libnccl's folder (the wheel's nvidia/nccl/lib), linked by segtool-train's c10d shim.
    println!("cargo:rerun-if-env-changed=DEP_SEGTOOL_C10D_RPATH");
    if let Ok(dir) = std::env::var("DEP_SEGTOOL_C10D_RPATH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
