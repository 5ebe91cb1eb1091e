//! An rpath to libtorch's lib folder (torch-sys reports it to direct dependents as
//! DEP_TCH_LIBTORCH_LIB), so the fuzz binaries run without LD_LIBRARY_PATH, as the
//! `segtool` binary does (its build.rs).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
