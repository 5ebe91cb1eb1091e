//! Gives the `segtool` binary (and this package's tests) an rpath to libtorch's lib
//! folder, so it runs without LD_LIBRARY_PATH. torch-sys reports that folder to its
//! direct dependents as DEP_TCH_LIBTORCH_LIB.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
