//! The `--auto` result as people read it: the verdict, the trade-off table (text, CSV,
//! JSON) with fp32, all-INT8 and each step of the search.

use super::*;

impl AutoResult {
    /// Speed-up of row `i` over fp32 (None when not timed).
    pub fn speedup(&self, i: usize) -> Option<f64> {
        let (f, r) = (self.rows[0].latency_ms, self.rows[i].latency_ms);
        (f > 0.0 && r > 0.0).then(|| f / r)
    }

    /// Whether the chosen point also meets `min_speedup` (true when none was asked, or
    /// when no point was chosen: the accuracy miss is the one to report then). An
    /// untimed point does not meet it.
    pub fn meets_speed(&self) -> bool {
        match (self.chosen, self.min_speedup) {
            (Some(i), Some(s)) => self.speedup(i).is_some_and(|x| x >= s),
            _ => true,
        }
    }

    /// Every target the result misses (empty: the model may ship).
    pub fn misses(&self) -> Vec<Miss> {
        let final_miss = self.final_check.as_ref().is_some_and(|f| !f.meets_target);
        [
            (self.chosen.is_none(), Miss::Accuracy),
            (!self.meets_speed(), Miss::Speed),
            (final_miss, Miss::FinalCheck),
        ]
        .into_iter()
        .filter_map(|(missed, m)| missed.then_some(m))
        .collect()
    }

    /// A miss in words: what was required, and where it was not met.
    fn miss_text(&self, miss: Miss) -> String {
        let t = self.target.describe();
        match miss {
            Miss::Accuracy => format!("{t} on the {} search images", self.validation_images),
            Miss::Speed => format!(
                "a {:.2}x speed-up over fp32 in {} (it runs at {})",
                self.min_speedup.unwrap_or(0.0),
                self.engine,
                match self.speedup(self.model_row) {
                    Some(x) => format!("{x:.2}x"),
                    None => "an untimed speed".into(),
                }
            ),
            Miss::FinalCheck => format!(
                "{t} on the {} held-out images of the final check",
                self.final_check.as_ref().map_or(0, |f| f.images)
            ),
        }
    }

    /// The model the result holds, in words.
    fn model_text(&self) -> String {
        let r = &self.rows[self.model_row];
        let what = match r.kind {
            RowKind::Fp32 => "fp32, the float model".to_string(),
            RowKind::Int8 => "the all-INT8 model".to_string(),
            RowKind::Step(_) => format!("the mix {}", r.label()),
        };
        match self.chosen {
            Some(_) => format!("{what}, the chosen point"),
            None => format!("{what}, the last one measured, as none was chosen"),
        }
    }

    /// What became of the model, in one sentence: written where, despite which misses,
    /// or not written and why ([`Written`]).
    pub fn written_line(&self) -> String {
        let misses = self.misses();
        let missed = misses
            .iter()
            .map(|&m| self.miss_text(m))
            .collect::<Vec<_>>()
            .join(" and ");
        let model = self.model_text();
        match (&self.written, misses.is_empty()) {
            (Written::To(p), true) => format!("written: {} ({model})", p.display()),
            (Written::To(p), false) => format!(
                "written despite the miss (--accept-miss): {} ({model}), which misses {missed}",
                p.display()
            ),
            (Written::Withheld(p), false) => format!(
                "nothing written: {} would be {model}, which misses {missed}; --accept-miss writes it anyway",
                p.display()
            ),
            (Written::Withheld(p), true) => {
                format!("nothing written: {} would be {model}", p.display())
            }
            (Written::Undecided, true) => format!("the model: {model}"),
            (Written::Undecided, false) => format!("the model: {model}, which misses {missed}"),
        }
    }

    /// How the search decided that a mix meets the target.
    pub fn criterion(&self) -> String {
        match self.target {
            Target::MinAgreement(_) if self.confidence > 0.0 => format!(
                "the {:.0}% lower confidence bound of the mean per-image agreement on the {} search images",
                self.confidence * 100.0,
                self.validation_images
            ),
            Target::MinAgreement(_) => format!(
                "the agreement on the {} search images",
                self.validation_images
            ),
            Target::MaxMiouDrop(_) => {
                format!("the mIoU on the {} search images", self.validation_images)
            }
        }
    }

    /// The final check in one sentence (or why there was none).
    pub fn final_check_line(&self) -> String {
        let Some(f) = &self.final_check else {
            return "final check: none (no validation images held out of the search)".into();
        };
        let figure = match (self.target, f.miou, f.miou_fp32) {
            (Target::MaxMiouDrop(_), Some(m), Some(fp)) => format!(
                "mIoU {m:.4} against fp32's {fp:.4} ({:.2} points lost)",
                (fp - m) * 100.0
            ),
            _ => format!("{:.3}% agreement", f.agreement * 100.0),
        };
        format!(
            "final check on {} validation images the search did not use: {figure}: {}",
            f.images,
            if f.meets_target {
                format!("meets {}", self.target.describe())
            } else {
                format!(
                    "MISSES {} (the search's images were not representative enough: give more validation images, or raise --confidence)",
                    self.target.describe()
                )
            }
        )
    }

    /// One sentence: what was chosen, or honestly that no mix meets the target(s), then
    /// what became of the model ([`Self::written_line`]).
    pub fn verdict(&self) -> String {
        format!("{}; {}", self.choice(), self.written_line())
    }

    /// What the search and the timing chose.
    fn choice(&self) -> String {
        let t = self.target.describe();
        let Some(i) = self.chosen else {
            return format!(
                "no mix of up to {} float layers meets {t} on {} validation images",
                self.candidates.len(),
                self.validation_images
            );
        };
        let passed_over = self.slower_mix.map(|j| {
            format!(
                "; {} met it first but runs at {} fp32's speed in {}",
                self.rows[j].label(),
                self.speed_text(j),
                self.engine
            )
        });
        if i == 0 {
            return format!(
                "chosen: fp32, the float model: every mix that meets {t} runs slower than fp32 in {}{}",
                self.engine,
                passed_over.unwrap_or_default()
            );
        }
        let r = &self.rows[i];
        if !self.meets_speed() {
            return format!(
                "no mix meets both {t} and a {:.2}x speed-up: the chosen one meeting the accuracy target ({}) runs at {} in {}",
                self.min_speedup.unwrap_or(0.0),
                r.label(),
                self.speed_text(i),
                self.engine
            );
        }
        let speed = match self.speedup(i) {
            Some(_) => format!(", {} fp32's speed in {}", self.speed_text(i), self.engine),
            None => String::new(),
        };
        let bound = match self.target {
            Target::MinAgreement(_) if self.confidence > 0.0 => format!(
                " ({:.0}% lower bound {:.3}%)",
                self.confidence * 100.0,
                r.agreement_bound * 100.0
            ),
            _ => String::new(),
        };
        format!(
            "chosen: {} ({} float layer(s)) meets {t} with {:.3}% agreement{bound}{}{speed}{}",
            r.label(),
            r.float_layers.len(),
            r.agreement * 100.0,
            r.miou
                .map(|m| format!(", mIoU {:.4}", m))
                .unwrap_or_default(),
            passed_over.unwrap_or_default()
        )
    }

    /// Row `i`'s speed-up over fp32 as `1.23x` (empty when not timed).
    fn speed_text(&self, i: usize) -> String {
        self.speedup(i)
            .map(|x| format!("{x:.2}x"))
            .unwrap_or_default()
    }

    pub fn csv(&self) -> String {
        let mut s = String::from(
            "row,float_layers,agreement,agreement_bound,miou,latency_ms,speedup,size_bytes,meets_target,chosen\n",
        );
        for (i, r) in self.rows.iter().enumerate() {
            s += &format!(
                "{},{},{:.6},{:.6},{},{:.3},{},{},{},{}\n",
                csv_field(&r.label()),
                csv_field(&r.float_layers.join(" ")),
                r.agreement,
                r.agreement_bound,
                r.miou.map(|m| format!("{m:.6}")).unwrap_or_default(),
                r.latency_ms,
                self.speedup(i)
                    .map(|x| format!("{x:.3}"))
                    .unwrap_or_default(),
                r.size_bytes,
                r.meets_target,
                Some(i) == self.chosen
            );
        }
        s
    }

    pub fn to_json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "row": r.label(),
                    "float_layers": r.float_layers,
                    "agreement": r.agreement,
                    "agreement_bound": r.agreement_bound,
                    "miou": r.miou,
                    "latency_ms": r.latency_ms,
                    "speedup": self.speedup(i),
                    "size_bytes": r.size_bytes,
                    "meets_target": r.meets_target,
                    "chosen": Some(i) == self.chosen,
                })
            })
            .collect();
        serde_json::json!({
            "target": {
                "metric": self.target.metric_name(),
                "description": self.target.describe(),
                "min_agreement": match self.target { Target::MinAgreement(a) => Some(a), _ => None },
                "max_miou_drop_points": match self.target { Target::MaxMiouDrop(p) => Some(p), _ => None },
                "min_speedup": self.min_speedup,
            },
            "calibration_images": self.calibration_images,
            "validation_images": self.validation_images,
            "criterion": self.criterion(),
            "confidence": self.confidence,
            "final_check": self.final_check.as_ref().map(|f| serde_json::json!({
                "images": f.images, "agreement": f.agreement, "miou": f.miou,
                "miou_fp32": f.miou_fp32, "meets_target": f.meets_target,
            })),
            "quantised_layers": self.quantised_layers,
            "cost_ranking": {
                "measured": self.cost_ranking.measured,
                "layers": self.cost_ranking.layers,
                "images": self.cost_ranking.images,
                "seconds": self.cost_ranking.seconds,
                "budget_s": self.cost_ranking.budget_s,
            },
            "engine": self.engine,
            "latency": format!("{}, one validation image, median over rounds x runs interleaved across the models", self.engine),
            "rows": rows,
            "chosen": self.chosen.map(|i| self.rows[i].label()),
            "passed_over_for_speed": self.slower_mix.map(|i| self.rows[i].label()),
            "meets_speed": self.meets_speed(),
            "misses": self.misses().iter().map(Miss::name).collect::<Vec<_>>(),
            "model": {
                "row": self.rows[self.model_row].label(),
                "chosen": self.chosen == Some(self.model_row),
                "written": match &self.written {
                    Written::To(_) => Some(true),
                    Written::Withheld(_) => Some(false),
                    Written::Undecided => None,
                },
                "path": match &self.written {
                    Written::To(p) | Written::Withheld(p) => Some(p.display().to_string()),
                    Written::Undecided => None,
                },
            },
            "verdict": self.verdict(),
            "candidates": self.candidates.iter().map(|c| serde_json::json!({
                "node": c.node, "output": c.output, "snr_db": c.snr_db, "cosine": c.cosine,
                "cost": c.cost,
            })).collect::<Vec<_>>(),
            "trials": self.trials.iter().map(|t| serde_json::json!({
                "step": t.step, "layer": t.layer, "agreement": t.agreement,
                "agreement_bound": t.agreement_bound, "miou": t.miou,
            })).collect::<Vec<_>>(),
        })
    }

    pub fn to_text(&self) -> String {
        let w = self
            .rows
            .iter()
            .map(|r| r.label().len())
            .max()
            .unwrap_or(4)
            .clamp(4, 56);
        let mut s = format!(
            "--auto: {} by {} (calibrated on {} images); {} of {} quantised layers searched, {} first; measured in {}\n  {}\n",
            self.target.describe(),
            self.criterion(),
            self.calibration_images,
            self.candidates.len(),
            self.quantised_layers,
            match self.cost_ranking.measured {
                0 => "worst SNR",
                _ => "costliest",
            },
            self.engine,
            self.cost_ranking.describe()
        );
        s += &format!(
            "  {:<w$} {:>10} {:>11} {:>8} {:>11} {:>8} {:>10}  target\n",
            "model", "agreement", "lower bound", "mIoU", "latency ms", "speedup", "size KB"
        );
        for (i, r) in self.rows.iter().enumerate() {
            let mark = if Some(i) == self.chosen { '*' } else { ' ' };
            s += &format!(
                "{mark} {:<w$} {:>9.3}% {:>10.3}% {:>8} {:>11.3} {:>8} {:>10.1}  {}\n",
                r.label(),
                r.agreement * 100.0,
                r.agreement_bound * 100.0,
                r.miou
                    .map(|m| format!("{m:.4}"))
                    .unwrap_or_else(|| "-".into()),
                r.latency_ms,
                self.speedup(i)
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "-".into()),
                r.size_bytes as f64 / 1024.0,
                if r.meets_target { "met" } else { "-" }
            );
        }
        s += &self.verdict();
        s.push('\n');
        s += &self.final_check_line();
        s.push('\n');
        s
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fp32 at 10 ms and all-INT8 at `int8_ms`, `chosen` as given; timed, no final check.
    fn result(int8_ms: f64, chosen: Option<usize>, min_speedup: Option<f64>) -> AutoResult {
        let row = |kind, latency_ms, meets_target| Row {
            kind,
            float_layers: Vec::new(),
            agreement: 0.99,
            agreement_bound: 0.98,
            miou: None,
            latency_ms,
            size_bytes: 1,
            meets_target,
        };
        AutoResult {
            model: Vec::new(),
            model_row: chosen.unwrap_or(1),
            written: Written::Undecided,
            trt_cache: String::new(),
            rows: vec![
                row(RowKind::Fp32, 10.0, true),
                row(RowKind::Int8, int8_ms, chosen.is_some()),
            ],
            chosen,
            slower_mix: None,
            candidates: Vec::new(),
            trials: Vec::new(),
            target: Target::MinAgreement(0.95),
            min_speedup,
            engine: "ONNX Runtime CPU".into(),
            calibration_images: 4,
            validation_images: 3,
            final_check: None,
            confidence: 0.95,
            quantised_layers: 2,
            cost_ranking: CostRanking {
                measured: 0,
                layers: 2,
                images: 0,
                seconds: 0.0,
                budget_s: 0.0,
            },
        }
    }

    #[test]
    fn every_miss_is_listed_and_the_verdict_says_what_was_written() {
        // Met: written, named.
        let mut r = result(5.0, Some(1), Some(1.5));
        assert!(r.misses().is_empty());
        r.written = Written::To("m.onnx".into());
        assert!(
            r.verdict()
                .ends_with("; written: m.onnx (the all-INT8 model, the chosen point)"),
            "{}",
            r.verdict()
        );

        // The speed target missed: withheld, saying why and what --accept-miss writes.
        let mut r = result(5.0, Some(1), Some(3.0));
        assert_eq!(r.misses(), [Miss::Speed]);
        r.written = Written::Withheld("m.onnx".into());
        let v = r.verdict();
        assert!(
            v.contains("nothing written: m.onnx would be the all-INT8 model")
                && v.contains(
                    "misses a 3.00x speed-up over fp32 in ONNX Runtime CPU (it runs at 2.00x)"
                )
                && v.ends_with("--accept-miss writes it anyway"),
            "{v}"
        );
        assert!(!v.contains("model written"), "{v}");
        let json = r.to_json();
        assert_eq!(json["misses"], serde_json::json!(["speed"]));
        assert_eq!(json["model"]["written"], false);
        assert_eq!(json["model"]["path"], "m.onnx");
        r.written = Written::To("m.onnx".into());
        assert!(
            r.verdict()
                .contains("written despite the miss (--accept-miss): m.onnx"),
            "{}",
            r.verdict()
        );

        // fp32 chosen (every mix slower) runs at 1x: a speed target above 1x is missed.
        let r = result(12.0, Some(0), Some(1.3));
        assert_eq!(r.misses(), [Miss::Speed]);
        assert!(r
            .verdict()
            .contains("fp32, the float model, the chosen point"));

        // No mix: the accuracy miss alone, the model the last one measured.
        let r = result(5.0, None, Some(3.0));
        assert_eq!(r.misses(), [Miss::Accuracy]);
        assert!(
            r.verdict()
                .contains("the all-INT8 model, the last one measured"),
            "{}",
            r.verdict()
        );
        assert_eq!(r.to_json()["model"]["written"], serde_json::Value::Null);
    }
}
