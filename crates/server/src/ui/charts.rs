//! SVG charts rendered on the server: no script, no external asset. Each chart is a
//! pure function of report JSON, drawn on a fixed `viewBox` that scales to its box.

use serde_json::Value;

use super::html::{esc, Format, Source};

/// Colours of the arms, in the campaign's arm order (cycled beyond eight arms).
pub(crate) const ARM_COLOURS: [&str; 8] = [
    "#1f5fbf", "#e07b00", "#2e9d5b", "#9c3fbf", "#c23b3b", "#00838f", "#6d6d6d", "#b08900",
];
const DEDUPED_COLOUR: &str = "#1f5fbf";
const NAIVE_COLOUR: &str = "#e07b00";
const PREDICTED_COLOUR: &str = "#5b6475";

const WIDTH: f64 = 640.0;
const LABEL_WIDTH: f64 = 170.0;
const RIGHT_MARGIN: f64 = 24.0;
const ROW_HEIGHT: f64 = 30.0;
const AXIS_HEIGHT: f64 = 28.0;
/// Widest bar of the duplicates chart, so a few hours do not make slabs.
const BAR_WIDTH_MAX: f64 = 36.0;

/// The colour of the arm at `index`.
pub(crate) fn arm_colour(index: usize) -> &'static str {
    ARM_COLOURS[index % ARM_COLOURS.len()]
}

/// One treatment arm's lifts for one metric, as the report holds them.
pub(crate) struct LiftRow<'a> {
    pub arm: &'a str,
    pub lift: &'a Value,
    pub naive_lift: &'a Value,
    pub predicted_naive_lift: &'a Value,
}

/// Horizontal whiskers: for every treatment arm, the deduplicated lift and the naive lift
/// with their confidence intervals around a zero line, and the predicted naive lift as
/// a tick on the naive row. An interval that does not cross zero is significant.
pub(crate) fn lift_whiskers(metric: &str, rows: &[LiftRow<'_>]) -> String {
    let numbers = rows.iter().flat_map(|r| {
        [r.lift, r.naive_lift]
            .into_iter()
            .flat_map(|l| [&l["estimate"], &l["ci_low"], &l["ci_high"]])
            .chain([r.predicted_naive_lift])
            .filter_map(Value::as_f64)
    });
    let scale = Scale::covering(numbers.chain([0.0]), LABEL_WIDTH, WIDTH - RIGHT_MARGIN);
    let height = rows.len() as f64 * 2.0 * ROW_HEIGHT + AXIS_HEIGHT + 8.0;
    let plot_bottom = height - AXIS_HEIGHT;
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"Lift of {m} with {level} intervals\" data-chart=\"lift\" data-metric=\"{m}\">",
        m = esc(metric),
        level = "95%",
    );
    svg.push_str(&scale.axis(4.0, plot_bottom, Format::SignedPercent));
    let zero = scale.x(0.0);
    svg.push_str(&format!(
        "<line x1=\"{zero:.1}\" y1=\"4\" x2=\"{zero:.1}\" y2=\"{plot_bottom:.1}\" stroke=\"#1d2330\" stroke-width=\"1\"/>"
    ));
    for (index, row) in rows.iter().enumerate() {
        let top = 4.0 + index as f64 * 2.0 * ROW_HEIGHT;
        let deduped = Whisker {
            metric,
            arm: row.arm,
            label: "deduplicated",
            field: "chart.lift",
            colour: DEDUPED_COLOUR,
            format: Format::SignedPercent,
        };
        svg.push_str(&deduped.draw(&scale, top + ROW_HEIGHT / 2.0, row.lift));
        let naive = Whisker {
            label: "naive",
            field: "chart.naive_lift",
            colour: NAIVE_COLOUR,
            ..deduped
        };
        let y = top + ROW_HEIGHT * 1.5;
        svg.push_str(&naive.draw(&scale, y, row.naive_lift));
        if let Some(p) = row.predicted_naive_lift.as_f64() {
            let x = scale.x(p);
            let source = Source {
                metric: Some(metric),
                arm: Some(row.arm),
                field: "chart.predicted_naive_lift",
            };
            svg.push_str(&format!(
                "<path d=\"M{x:.1} {a:.1} L{r:.1} {y:.1} L{x:.1} {b:.1} L{l:.1} {y:.1} Z\" fill=\"none\" stroke=\"{PREDICTED_COLOUR}\" stroke-width=\"1.5\"{attrs}><title>predicted naive lift {text}</title></path>",
                a = y - 6.0,
                b = y + 6.0,
                l = x - 6.0,
                r = x + 6.0,
                attrs = source.attributes(row.predicted_naive_lift),
                text = Format::SignedPercent.number(p),
            ));
        }
    }
    svg.push_str("</svg>");
    svg
}

/// Per-arm whiskers: every arm's own deduplicated value with its 95% interval, and its
/// naive value (every delivery counted) as a second row, on one axis so arms compare at a
/// glance. `arms` pairs each arm key with its metric object from the report.
pub(crate) fn value_whiskers(metric: &str, format: Format, arms: &[(&str, &Value)]) -> String {
    let rows: Vec<(&str, Value, Value)> = arms
        .iter()
        .map(|(arm, m)| {
            let own = serde_json::json!({"estimate": m["value"], "ci_low": m["value_ci"]["low"], "ci_high": m["value_ci"]["high"]});
            let naive = serde_json::json!({"estimate": m["naive_value"], "ci_low": null, "ci_high": null});
            (*arm, own, naive)
        })
        .collect();
    let numbers = rows.iter().flat_map(|(_, own, naive)| {
        [
            &own["estimate"],
            &own["ci_low"],
            &own["ci_high"],
            &naive["estimate"],
        ]
        .into_iter()
        .filter_map(Value::as_f64)
    });
    let scale = Scale::covering(numbers, LABEL_WIDTH, WIDTH - RIGHT_MARGIN);
    let height = rows.len() as f64 * 2.0 * ROW_HEIGHT + AXIS_HEIGHT + 8.0;
    let plot_bottom = height - AXIS_HEIGHT;
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{m} per arm with 95% intervals\" data-chart=\"value\" data-metric=\"{m}\">",
        m = esc(metric),
    );
    svg.push_str(&scale.axis(4.0, plot_bottom, format));
    for (index, (arm, own, naive)) in rows.iter().enumerate() {
        let top = 4.0 + index as f64 * 2.0 * ROW_HEIGHT;
        // The same two colours as the lift chart: deduplicated blue, naive orange.
        let deduped = Whisker {
            metric,
            arm,
            label: "deduplicated",
            field: "chart.value",
            colour: DEDUPED_COLOUR,
            format,
        };
        svg.push_str(&deduped.draw(&scale, top + ROW_HEIGHT / 2.0, own));
        let naive_whisker = Whisker {
            label: "naive",
            field: "chart.naive_value",
            colour: NAIVE_COLOUR,
            ..deduped
        };
        svg.push_str(&naive_whisker.draw(&scale, top + ROW_HEIGHT * 1.5, naive));
    }
    svg.push_str("</svg>");
    svg
}

#[derive(Clone, Copy)]
struct Whisker<'a> {
    metric: &'a str,
    arm: &'a str,
    label: &'a str,
    field: &'a str,
    colour: &'a str,
    format: Format,
}

impl Whisker<'_> {
    fn draw(&self, scale: &Scale, y: f64, lift: &Value) -> String {
        let mut out = format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} · {}</text>",
            LABEL_WIDTH - 10.0,
            y + 4.0,
            esc(self.arm),
            self.label
        );
        let (estimate, low, high) = (
            lift["estimate"].as_f64(),
            lift["ci_low"].as_f64(),
            lift["ci_high"].as_f64(),
        );
        if let (Some(low), Some(high)) = (low, high) {
            let (x1, x2) = (scale.x(low), scale.x(high));
            out.push_str(&format!(
                "<path d=\"M{x1:.1} {a:.1} V{b:.1} M{x1:.1} {y:.1} H{x2:.1} M{x2:.1} {a:.1} V{b:.1}\" stroke=\"{c}\" stroke-width=\"2\" fill=\"none\"/>",
                a = y - 6.0,
                b = y + 6.0,
                c = self.colour
            ));
        }
        match estimate {
            Some(e) => {
                let source = Source {
                    metric: Some(self.metric),
                    arm: Some(self.arm),
                    field: self.field,
                };
                out.push_str(&format!(
                    "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"5\" fill=\"{}\"{}><title>{} {} [{}, {}]</title></circle>",
                    scale.x(e),
                    self.colour,
                    source.attributes(&lift["estimate"]),
                    self.label,
                    self.format.number(e),
                    self.format.apply(&lift["ci_low"]),
                    self.format.apply(&lift["ci_high"]),
                ));
            }
            None => out.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\">not defined</text>",
                LABEL_WIDTH + 6.0,
                y + 4.0
            )),
        }
        out
    }
}

/// Suppressed duplicates per arrival hour, one bar per arm in each hour.
pub(crate) fn duplicates_over_time(arms: &[&str], points: &[Value]) -> String {
    let mut buckets: Vec<&str> = Vec::new();
    for point in points {
        if let Some(start) = point["bucket_start"].as_str() {
            if buckets.last() != Some(&start) {
                buckets.push(start);
            }
        }
    }
    if buckets.is_empty() {
        return "<p class=\"meta\" data-chart=\"duplicates\">No duplicate deliveries suppressed yet.</p>".to_string();
    }
    let (left, right, top, height) = (56.0, WIDTH - RIGHT_MARGIN, 8.0, 260.0);
    let bottom = height - AXIS_HEIGHT - 6.0;
    let max = points
        .iter()
        .filter_map(|p| p["duplicates"].as_f64())
        .fold(1.0_f64, f64::max);
    let y_scale = Scale::covering([0.0, max], bottom, top);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"Duplicate deliveries per hour and arm\" data-chart=\"duplicates\">"
    );
    for tick in y_scale.ticks() {
        let y = y_scale.x(tick);
        svg.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"#dde1e8\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            y + 4.0,
            Format::Count.number(tick)
        ));
    }
    let band = (right - left) / buckets.len() as f64;
    let bar = (band * 0.8 / arms.len().max(1) as f64).clamp(1.0, BAR_WIDTH_MAX);
    let group = bar * arms.len() as f64;
    let label_every = buckets.len().div_ceil(6);
    for (index, start) in buckets.iter().enumerate() {
        let x0 = left + index as f64 * band + (band - group) / 2.0;
        for (arm_index, arm) in arms.iter().enumerate() {
            let found = points.iter().find(|p| {
                p["bucket_start"].as_str() == Some(start) && p["arm"].as_str() == Some(arm)
            });
            let Some(count) = found.map(|p| &p["duplicates"]) else {
                continue;
            };
            let y = y_scale.x(count.as_f64().unwrap_or(0.0));
            let source = Source {
                metric: None,
                arm: Some(arm),
                field: "chart.duplicates",
            };
            svg.push_str(&format!(
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"{}\" data-bucket=\"{}\"{}><title>{} · {} UTC: {}</title></rect>",
                x0 + arm_index as f64 * bar,
                (bottom - y).max(0.0),
                arm_colour(arm_index),
                esc(start),
                source.attributes(count),
                esc(arm),
                esc(&hour_label(start)),
                Format::Count.apply(count),
            ));
        }
        if index % label_every == 0 {
            svg.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                x0 + group / 2.0,
                bottom + 18.0,
                esc(&hour_label(start))
            ));
        }
    }
    svg.push_str(&format!(
        "<line x1=\"{left}\" y1=\"{bottom:.1}\" x2=\"{right}\" y2=\"{bottom:.1}\" stroke=\"#1d2330\"/></svg>"
    ));
    svg
}

/// `2026-11-29T10:00:00.000000Z` → `2026-11-29 10:00`.
fn hour_label(start: &str) -> String {
    match (start.get(0..10), start.get(11..16)) {
        (Some(day), Some(time)) => format!("{day} {time}"),
        _ => start.to_string(),
    }
}

/// A linear map from a value domain to pixels, with round tick values.
struct Scale {
    low: f64,
    high: f64,
    from_px: f64,
    to_px: f64,
}

impl Scale {
    /// A domain covering every value, padded by 8% on each side.
    fn covering(values: impl IntoIterator<Item = f64>, from_px: f64, to_px: f64) -> Scale {
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.into_iter().filter(|v| v.is_finite()) {
            low = low.min(v);
            high = high.max(v);
        }
        if !(low.is_finite() && high.is_finite()) {
            (low, high) = (-0.01, 0.01);
        }
        if high - low < 1e-12 {
            (low, high) = (low - 0.01, high + 0.01);
        }
        let pad = (high - low) * 0.08;
        Scale {
            low: low - pad,
            high: high + pad,
            from_px,
            to_px,
        }
    }

    fn x(&self, value: f64) -> f64 {
        self.from_px + (value - self.low) / (self.high - self.low) * (self.to_px - self.from_px)
    }

    /// Round values inside the domain: steps of 1, 2 or 5 times a power of ten.
    fn ticks(&self) -> Vec<f64> {
        let raw = (self.high - self.low) / 5.0;
        let power = 10_f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * power)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        let mut ticks = Vec::new();
        let mut tick = (self.low / step).ceil() * step;
        while tick <= self.high && ticks.len() < 12 {
            // Snap near-zero floating residue so the axis reads `0`, not `-0.00`.
            ticks.push(if tick.abs() < step * 1e-9 { 0.0 } else { tick });
            tick += step;
        }
        ticks
    }

    /// A horizontal axis with grid lines from `top` to `bottom`, labels below.
    fn axis(&self, top: f64, bottom: f64, format: Format) -> String {
        let mut out = String::new();
        for tick in self.ticks() {
            let x = self.x(tick);
            out.push_str(&format!(
                "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"#dde1e8\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                bottom + 18.0,
                format.number(tick)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ticks_are_round_and_inside_the_domain() {
        let scale = Scale::covering([-0.013, 0.042], 0.0, 100.0);
        let ticks = scale.ticks();
        assert!(ticks.len() >= 3, "{ticks:?}");
        assert!(ticks.iter().all(|t| *t >= scale.low && *t <= scale.high));
        assert!(ticks.contains(&0.0));
    }

    #[test]
    fn whiskers_escape_arm_names_and_survive_missing_lifts() {
        let lift = json!({"estimate": 0.1, "ci_low": -0.05, "ci_high": 0.25, "p_value": 0.2});
        let rows = [LiftRow {
            arm: "<b>t</b>",
            lift: &lift,
            naive_lift: &Value::Null,
            predicted_naive_lift: &Value::Null,
        }];
        let svg = lift_whiskers("m\"x", &rows);
        assert!(!svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;b&gt;t&lt;/b&gt;"));
        assert!(svg.contains("not defined"));
    }

    #[test]
    fn no_duplicates_is_said_in_words() {
        assert!(duplicates_over_time(&["c"], &[]).contains("No duplicate"));
    }
}
