//! Gives the `segtool` binary (and this package's tests) an rpath to libtorch's lib
//! folder, so it runs without LD_LIBRARY_PATH. torch-sys reports that folder to its
//! direct dependents as DEP_TCH_LIBTORCH_LIB; segtool-train reports libnccl's folder
//! (its c10d shim links NCCL) as DEP_SEGTOOL_C10D_RPATH.
fn main() {
    git_commit();
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

/// SEGTOOL_GIT_COMMIT: the checkout's commit (`segtool report`'s environment receipt),
/// "unknown" outside a git checkout or without git.
fn git_commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SEGTOOL_GIT_COMMIT={commit}");
    // Rebuilt when HEAD moves: HEAD itself (branch switch), the branch's ref, packed refs
    // (only files that exist: a missing one would rerun this script on every build).
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watch {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}
