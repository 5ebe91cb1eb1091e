//! `segtool ros2 ...`: runs `segtool-ros2` (the ROS 2 node and bag converter, a binary of
//! its own so that this one's build stays free of the DDS stack), found next to this
//! binary or on PATH, with the same arguments (`--ros-args` included).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::{bail, Result};

#[derive(clap::Args)]
pub struct Args {
    /// `node ...` or `bag ...` (see `segtool ros2 node --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

const PROGRAM: &str = "segtool-ros2";

/// `segtool-ros2` beside this executable, else on PATH.
fn program() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(PROGRAM)))
        .filter(|p| p.is_file());
    beside.or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(PROGRAM))
                .find(|p| p.is_file())
        })
    })
}

pub fn run(args: Args) -> Result<()> {
    let Some(program) = program() else {
        bail!(
            "{PROGRAM} is not built: `cargo build -p segtool-ros2` puts it next to segtool \
             (`make test` builds it too)"
        );
    };
    // exec: signals (Ctrl-C ends the node) and the exit status are the node's own.
    let err = std::process::Command::new(&program).args(&args.args).exec();
    bail!("running {}: {err}", program.display())
}
