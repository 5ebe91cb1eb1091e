//! The node's parameters over ROS 2: every declared parameter with its value at start,
//! offered through `ros2-client`'s six `rcl_interfaces` services (`get_parameters`,
//! `get_parameter_types`, `set_parameters`, `set_parameters_atomically`,
//! `list_parameters`, `describe_parameters`) and `/parameter_events`.
//!
//! A set of a read-only parameter is refused with a reason (ROS 2's
//! `SetParametersResult`); the others ([`Live`]: alpha, which pictures to publish, the
//! diagnostics period) are checked and take effect on the next frame.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ros2_client::{NodeOptions, ParameterValue};

use crate::params::{declaration, Value};

/// The parameters that change while the node runs, read by the node on every frame.
pub struct Live {
    alpha: AtomicU32,
    color_mask: AtomicBool,
    overlay: AtomicBool,
    diagnostics_ns: AtomicU64,
    /// Set once the node is up: the declarations themselves go through the validator.
    running: AtomicBool,
}

impl Live {
    pub fn new(alpha: f32, color_mask: bool, overlay: bool, diagnostics: Duration) -> Self {
        Self {
            alpha: AtomicU32::new(alpha.to_bits()),
            color_mask: AtomicBool::new(color_mask),
            overlay: AtomicBool::new(overlay),
            diagnostics_ns: AtomicU64::new(diagnostics.as_nanos() as u64),
            running: AtomicBool::new(false),
        }
    }

    /// From now on sets come from clients: read-only parameters refuse them.
    pub fn set_running(&self) {
        self.running.store(true, Ordering::Relaxed);
    }

    pub fn alpha(&self) -> f32 {
        f32::from_bits(self.alpha.load(Ordering::Relaxed))
    }

    pub fn publish_color_mask(&self) -> bool {
        self.color_mask.load(Ordering::Relaxed)
    }

    pub fn publish_overlay(&self) -> bool {
        self.overlay.load(Ordering::Relaxed)
    }

    pub fn diagnostics_period(&self) -> Duration {
        Duration::from_nanos(self.diagnostics_ns.load(Ordering::Relaxed))
    }

    /// Checks a new value of `name` (`Err` with the reason a client is shown).
    fn check(&self, name: &str, value: &ParameterValue) -> Result<(), String> {
        let Some(d) = declaration(name) else {
            return Err(format!("{name} is not a parameter of this node"));
        };
        if !self.running.load(Ordering::Relaxed) {
            return Ok(()); // the declaration of the value the node starts with
        }
        if d.read_only {
            return Err(format!(
                "{name} is read-only: it takes effect when the node starts (-p {name}:=... or a \
                 parameter file)"
            ));
        }
        match (name, value) {
            ("alpha", ParameterValue::Double(a)) if (0.0..=1.0).contains(a) => Ok(()),
            ("alpha", _) => Err("alpha: a double from 0 to 1".into()),
            ("diagnostics_period", ParameterValue::Double(s)) if *s > 0.0 && s.is_finite() => {
                Ok(())
            }
            ("diagnostics_period", _) => Err("diagnostics_period: seconds, above 0".into()),
            ("publish_color_mask" | "publish_overlay", ParameterValue::Boolean(_)) => Ok(()),
            _ => Err(format!("{name}: expected {}", d.kind)),
        }
    }

    /// Applies a checked value.
    fn apply(&self, name: &str, value: &ParameterValue) -> Result<(), String> {
        match (name, value) {
            ("alpha", ParameterValue::Double(a)) => {
                self.alpha.store((*a as f32).to_bits(), Ordering::Relaxed)
            }
            ("diagnostics_period", ParameterValue::Double(s)) => self.diagnostics_ns.store(
                Duration::from_secs_f64(*s).as_nanos() as u64,
                Ordering::Relaxed,
            ),
            ("publish_color_mask", ParameterValue::Boolean(b)) => {
                self.color_mask.store(*b, Ordering::Relaxed)
            }
            ("publish_overlay", ParameterValue::Boolean(b)) => {
                self.overlay.store(*b, Ordering::Relaxed)
            }
            _ => return Err(format!("{name} cannot change while the node runs")),
        }
        Ok(())
    }
}

/// A parameter value as `rcl_interfaces` carries it.
pub fn to_ros(value: &Value) -> ParameterValue {
    match value {
        Value::Bool(b) => ParameterValue::Boolean(*b),
        Value::Integer(i) => ParameterValue::Integer(*i),
        Value::Double(d) => ParameterValue::Double(*d),
        Value::String(s) => ParameterValue::String(s.clone()),
        Value::StringArray(v) => ParameterValue::StringArray(v.clone()),
    }
}

/// Node options declaring `values` (every declared parameter with its value at start),
/// refusing sets of read-only ones with a reason and applying the others to `live`.
pub fn node_options(values: &[(&'static str, Value)], live: Arc<Live>) -> NodeOptions {
    let mut options = NodeOptions::new()
        .enable_rosout(false)
        .start_parameter_services(true);
    for (name, value) in values {
        options = options.declare_parameter(name, to_ros(value));
        if let Some(d) = declaration(name) {
            options = options.describe_parameter(name, d.description, d.read_only);
        }
    }
    let checker = live.clone();
    options
        .parameter_validator(Box::new(move |name, value| checker.check(name, value)))
        .parameter_set_action(Box::new(move |name, value| {
            match live.running.load(Ordering::Relaxed) {
                true => live.apply(name, value),
                false => Ok(()),
            }
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_sets_are_refused_with_a_reason_and_live_ones_apply() {
        let live = Live::new(0.5, true, true, Duration::from_secs(1));
        // Declaring the start values passes; then the node runs and clients are checked.
        live.check("model", &ParameterValue::String("m.onnx".into()))
            .unwrap();
        live.set_running();
        let e = live
            .check("model", &ParameterValue::String("x.onnx".into()))
            .unwrap_err();
        assert!(e.contains("read-only"), "{e}");
        assert!(live.check("alpha", &ParameterValue::Double(1.5)).is_err());
        live.check("alpha", &ParameterValue::Double(0.25)).unwrap();
        live.apply("alpha", &ParameterValue::Double(0.25)).unwrap();
        assert_eq!(live.alpha(), 0.25);
        live.apply("publish_overlay", &ParameterValue::Boolean(false))
            .unwrap();
        assert!(!live.publish_overlay() && live.publish_color_mask());
        live.apply("diagnostics_period", &ParameterValue::Double(0.5))
            .unwrap();
        assert_eq!(live.diagnostics_period(), Duration::from_millis(500));
    }
}
