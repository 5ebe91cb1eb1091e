//! Activation thresholds (clipping ranges) from statistics; the scale is `threshold / 127`.

pub mod entropy;
pub mod minmax;
pub mod mse;
pub mod percentile;
