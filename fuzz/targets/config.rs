//! TOML run configs: the input is a whole `--config` file.
//!
//! Feeds it, as a scratch `.toml`, to what `segtool train --config FILE` does before any
//! dataset is opened: `RunConfig::preset_or_file` (a path that is not a preset's name is
//! read as a file), `validate`, the backbone it asks for, the start-of-run summary and
//! schedule, and the config's own TOML (written into each checkpoint and run folder, read
//! back by `--resume`), which must parse again.
//!
//! Refuses nothing.

use segtool_core::config::RunConfig;

pub fn run(data: &[u8]) {
    let path = super::support::write("run.toml", data);
    let Ok(cfg) = RunConfig::preset_or_file(path.to_str().expect("scratch paths are UTF-8")) else {
        return;
    };
    if cfg.validate().is_err() {
        return;
    }
    let _ = cfg.backbone_spec();
    let _ = cfg.summary(None);
    let _ = cfg.summary(Some(2975));
    let _ = (cfg.total_iterations(2975), cfg.effective_lr());
    let text = cfg.to_toml_string();
    if let Err(e) = RunConfig::from_toml_str(&text) {
        panic!("a valid config's TOML does not parse back: {e}\n{text}");
    }
}
