//! SVG charts rendered on the server: no script, no external asset. Each chart is a
//! pure function of the typed report, written with `maud` like the pages (so arm and
//! metric names are escaped by type here too), on a fixed `viewBox` that scales to its
//! box.

use maud::{html, Markup};
use traqlyte_experiments::report::{DuplicateBucket, WindowReport};
use traqlyte_stats::Lift;

use super::html::{json_text, Format, Px, Source};

/// Colours of the arms, in the campaign's arm order (cycled beyond eight arms).
pub(crate) const ARM_COLOURS: [&str; 8] = [
    "#1f5fbf", "#e07b00", "#2e9d5b", "#9c3fbf", "#c23b3b", "#00838f", "#6d6d6d", "#b08900",
];
/// The deduplicated figures' colour, in charts and legends.
pub(crate) const DEDUPED_COLOUR: &str = "#1f5fbf";
/// The naive figures' colour, in charts and legends.
pub(crate) const NAIVE_COLOUR: &str = "#e07b00";
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
    pub lift: Option<Lift>,
    pub naive_lift: Option<Lift>,
    pub predicted_naive_lift: Option<f64>,
}

/// An estimate with its interval, as a whisker draws it.
#[derive(Debug, Clone, Copy)]
struct Point {
    estimate: Option<f64>,
    ci: Option<(f64, f64)>,
}

impl Point {
    fn of_lift(lift: Option<Lift>) -> Point {
        Point {
            estimate: lift.and_then(|l| l.estimate()),
            ci: lift.and_then(|l| l.ci()),
        }
    }

    fn numbers(&self) -> impl Iterator<Item = f64> {
        let (low, high) = self.ci.unzip();
        [self.estimate, low, high].into_iter().flatten()
    }
}

/// Horizontal whiskers: for every treatment arm, the deduplicated lift and the naive lift
/// with their confidence intervals around a zero line, and the predicted naive lift as
/// a tick on the naive row. An interval that does not cross zero is significant.
pub(crate) fn lift_whiskers(metric: &str, rows: &[LiftRow<'_>]) -> Markup {
    let numbers = rows.iter().flat_map(|r| {
        let (lift, naive) = (Point::of_lift(r.lift), Point::of_lift(r.naive_lift));
        lift.numbers()
            .chain(naive.numbers())
            .chain(r.predicted_naive_lift)
            .collect::<Vec<_>>()
    });
    let scale = Scale::covering(numbers.chain([0.0]), LABEL_WIDTH, WIDTH - RIGHT_MARGIN);
    let height = rows.len() as f64 * 2.0 * ROW_HEIGHT + AXIS_HEIGHT + 8.0;
    let plot_bottom = height - AXIS_HEIGHT;
    let zero = Px(scale.x(0.0));
    html! {
        svg viewBox={ "0 0 " (WIDTH) " " (height) } role="img"
            aria-label={ "Lift of " (metric) " with 95% intervals" }
            data-chart="lift" data-metric=(metric) {
            (scale.axis(4.0, plot_bottom, Format::SignedPercent))
            line x1=(zero) y1="4" x2=(zero) y2=(Px(plot_bottom)) stroke="#1d2330" stroke-width="1" {}
            @for (index, row) in rows.iter().enumerate() {
                @let top = 4.0 + index as f64 * 2.0 * ROW_HEIGHT;
                @let deduped = Whisker {
                    metric,
                    arm: row.arm,
                    label: "deduplicated",
                    field: "chart.lift",
                    colour: DEDUPED_COLOUR,
                    format: Format::SignedPercent,
                };
                @let naive = Whisker {
                    label: "naive",
                    field: "chart.naive_lift",
                    colour: NAIVE_COLOUR,
                    ..deduped
                };
                @let y = top + ROW_HEIGHT * 1.5;
                (deduped.draw(&scale, top + ROW_HEIGHT / 2.0, Point::of_lift(row.lift)))
                (naive.draw(&scale, y, Point::of_lift(row.naive_lift)))
                @if let Some(p) = row.predicted_naive_lift {
                    (predicted_tick(&scale, metric, row.arm, y, p))
                }
            }
        }
    }
}

/// A diamond on the naive row where the duplicate rates predict the naive lift.
fn predicted_tick(scale: &Scale, metric: &str, arm: &str, y: f64, p: f64) -> Markup {
    let x = scale.x(p);
    let d = format!(
        "M{x:.1} {a:.1} L{r:.1} {y:.1} L{x:.1} {b:.1} L{l:.1} {y:.1} Z",
        a = y - 6.0,
        b = y + 6.0,
        l = x - 6.0,
        r = x + 6.0,
    );
    html! {
        path d=(d) fill="none" stroke=(PREDICTED_COLOUR) stroke-width="1.5"
            data-metric=(metric) data-arm=(arm) data-field="chart.predicted_naive_lift"
            data-value=(json_text(&p)) {
            title { "predicted naive lift " (Format::SignedPercent.number(p)) }
        }
    }
}

/// Per-arm whiskers: every arm's own deduplicated value with its 95% interval, and its
/// naive value (every delivery counted) as a second row, on one axis so arms compare at a
/// glance. `format` is the value's, `naive_format` the naive value's (a naive
/// "conversion" is events per unit, not a rate).
pub(crate) fn value_whiskers(
    metric: &str,
    format: Format,
    naive_format: Format,
    arms: &[(&str, &WindowReport)],
) -> Markup {
    let rows: Vec<(&str, Point, Point)> = arms
        .iter()
        .map(|(arm, m)| {
            let own = Point {
                estimate: m.value,
                ci: m.value_ci.map(|i| (i.low, i.high)),
            };
            let naive = Point {
                estimate: m.naive_value,
                ci: None,
            };
            (*arm, own, naive)
        })
        .collect();
    let numbers = rows
        .iter()
        .flat_map(|(_, own, naive)| own.numbers().chain(naive.numbers()).collect::<Vec<_>>());
    let scale = Scale::covering(numbers, LABEL_WIDTH, WIDTH - RIGHT_MARGIN);
    let height = rows.len() as f64 * 2.0 * ROW_HEIGHT + AXIS_HEIGHT + 8.0;
    let plot_bottom = height - AXIS_HEIGHT;
    // A conversion's rate (units) and its naive value (events per unit) share the axis as
    // numbers per unit: ticks in percent read 0.30 events a unit as "30%".
    let (axis_format, per_unit) = if format == naive_format {
        (format, "")
    } else {
        (
            Format::Decimal,
            " (per unit: conversion rate, naive events)",
        )
    };
    html! {
        svg viewBox={ "0 0 " (WIDTH) " " (height) } role="img"
            aria-label={ (metric) " per arm with 95% intervals" (per_unit) }
            data-chart="value" data-metric=(metric) {
            (scale.axis(4.0, plot_bottom, axis_format))
            @for (index, (arm, own, naive)) in rows.iter().enumerate() {
                @let top = 4.0 + index as f64 * 2.0 * ROW_HEIGHT;
                // The same two colours as the lift chart: deduplicated blue, naive orange.
                @let deduped = Whisker {
                    metric,
                    arm,
                    label: "deduplicated",
                    field: "chart.value",
                    colour: DEDUPED_COLOUR,
                    format,
                };
                @let naive_whisker = Whisker {
                    label: "naive",
                    field: "chart.naive_value",
                    colour: NAIVE_COLOUR,
                    format: naive_format,
                    ..deduped
                };
                (deduped.draw(&scale, top + ROW_HEIGHT / 2.0, *own))
                (naive_whisker.draw(&scale, top + ROW_HEIGHT * 1.5, *naive))
            }
        }
    }
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
    fn draw(&self, scale: &Scale, y: f64, point: Point) -> Markup {
        let source = Source {
            metric: Some(self.metric),
            arm: Some(self.arm),
            field: self.field,
        };
        let (low, high) = point.ci.unzip();
        html! {
            text x=(Px(LABEL_WIDTH - 10.0)) y=(Px(y + 4.0)) text-anchor="end" {
                (self.arm) " · " (self.label)
            }
            @if let Some((low, high)) = point.ci {
                @let (x1, x2) = (scale.x(low), scale.x(high));
                path d=(format!(
                    "M{x1:.1} {a:.1} V{b:.1} M{x1:.1} {y:.1} H{x2:.1} M{x2:.1} {a:.1} V{b:.1}",
                    a = y - 6.0,
                    b = y + 6.0,
                )) stroke=(self.colour) stroke-width="2" fill="none" {}
            }
            @match point.estimate {
                Some(e) => {
                    circle cx=(Px(scale.x(e))) cy=(Px(y)) r="5" fill=(self.colour)
                        data-metric=[source.metric] data-arm=[source.arm]
                        data-field=(source.field) data-value=(json_text(&e)) {
                        title {
                            (self.label) " " (self.format.number(e))
                            @if point.ci.is_some() {
                                " [" (self.format.opt(low)) ", " (self.format.opt(high)) "]"
                            }
                        }
                    }
                }
                None => {
                    text x=(Px(LABEL_WIDTH + 6.0)) y=(Px(y + 4.0)) { "not defined" }
                }
            }
        }
    }
}

/// Suppressed duplicates per arrival hour, one bar per arm in each hour.
pub(crate) fn duplicates_over_time(arms: &[&str], points: &[DuplicateBucket]) -> Markup {
    let mut buckets: Vec<&str> = Vec::new();
    for point in points {
        if buckets.last() != Some(&point.bucket_start.as_str()) {
            buckets.push(&point.bucket_start);
        }
    }
    if buckets.is_empty() {
        return html! {
            p.meta data-chart="duplicates" { "No duplicate deliveries suppressed yet." }
        };
    }
    let (left, right, top, height) = (56.0, WIDTH - RIGHT_MARGIN, 8.0, 260.0);
    let bottom = height - AXIS_HEIGHT - 6.0;
    let max = points
        .iter()
        .map(|p| p.duplicates as f64)
        .fold(1.0_f64, f64::max);
    let y_scale = Scale::covering([0.0, max], bottom, top);
    let band = (right - left) / buckets.len() as f64;
    let bar = (band * 0.8 / arms.len().max(1) as f64).clamp(1.0, BAR_WIDTH_MAX);
    let group = bar * arms.len() as f64;
    let label_every = buckets.len().div_ceil(6);
    html! {
        svg viewBox={ "0 0 " (WIDTH) " " (height) } role="img"
            aria-label="Duplicate deliveries per hour and arm" data-chart="duplicates" {
            @for tick in y_scale.ticks() {
                @let y = y_scale.x(tick);
                line x1=(left) y1=(Px(y)) x2=(right) y2=(Px(y)) stroke="#dde1e8" {}
                text x=(Px(left - 6.0)) y=(Px(y + 4.0)) text-anchor="end" { (Format::Count.number(tick)) }
            }
            @for (index, start) in buckets.iter().enumerate() {
                @let x0 = left + index as f64 * band + (band - group) / 2.0;
                @for (arm_index, arm) in arms.iter().enumerate() {
                    @if let Some(found) = points.iter().find(|p| p.bucket_start == *start && p.arm == *arm) {
                        @let y = y_scale.x(found.duplicates as f64);
                        rect x=(Px(x0 + arm_index as f64 * bar)) y=(Px(y)) width=(Px(bar))
                            height=(Px((bottom - y).max(0.0))) fill=(arm_colour(arm_index))
                            data-bucket=(start) data-arm=(arm) data-field="chart.duplicates"
                            data-value=(found.duplicates) {
                            title {
                                (arm) " · " (hour_label(start)) " UTC: "
                                (Format::Count.number(found.duplicates as f64))
                            }
                        }
                    }
                }
                @if index % label_every == 0 {
                    text x=(Px(x0 + group / 2.0)) y=(Px(bottom + 18.0)) text-anchor="middle" {
                        (hour_label(start))
                    }
                }
            }
            line x1=(left) y1=(Px(bottom)) x2=(right) y2=(Px(bottom)) stroke="#1d2330" {}
        }
    }
}

/// The duplicate rate of one contract per bucket, one bar per source in each bucket
/// (the `/ui/ops` page; `series` is `(source, buckets)`, every series over the same
/// buckets, as `GET /ops/duplicates` answers them).
pub(crate) fn duplicate_rate_over_time(
    contract: &str,
    series: &[(&str, &[crate::ops::TrendBucket])],
) -> Markup {
    let Some((_, first)) = series.first() else {
        return html! { p.meta data-chart="duplicate-rate" { "No deliveries in this range." } };
    };
    let (left, right, top, height) = (56.0, WIDTH - RIGHT_MARGIN, 8.0, 260.0);
    let bottom = height - AXIS_HEIGHT - 6.0;
    let max = series
        .iter()
        .flat_map(|(_, buckets)| buckets.iter().filter_map(|b| b.duplicate_rate))
        .fold(0.01_f64, f64::max);
    let y_scale = Scale::covering([0.0, max], bottom, top);
    let band = (right - left) / first.len().max(1) as f64;
    let bar = (band * 0.8 / series.len() as f64).clamp(1.0, BAR_WIDTH_MAX);
    let group = bar * series.len() as f64;
    let label_every = first.len().div_ceil(6).max(1);
    html! {
        svg viewBox={ "0 0 " (WIDTH) " " (height) } role="img"
            aria-label={ "Duplicate rate of " (contract) " per bucket and source" }
            data-chart="duplicate-rate" data-contract=(contract) {
            @for tick in y_scale.ticks() {
                @let y = y_scale.x(tick);
                line x1=(left) y1=(Px(y)) x2=(right) y2=(Px(y)) stroke="#dde1e8" {}
                text x=(Px(left - 6.0)) y=(Px(y + 4.0)) text-anchor="end" { (Format::Percent.number(tick)) }
            }
            @for (index, bucket) in first.iter().enumerate() {
                @let x0 = left + index as f64 * band + (band - group) / 2.0;
                @for (source_index, (source, buckets)) in series.iter().enumerate() {
                    @if let Some(rate) = buckets.get(index).and_then(|b| b.duplicate_rate) {
                        @let y = y_scale.x(rate);
                        rect x=(Px(x0 + source_index as f64 * bar)) y=(Px(y)) width=(Px(bar))
                            height=(Px((bottom - y).max(0.0))) fill=(arm_colour(source_index))
                            data-bucket=(bucket.start) data-source=(source) data-contract=(contract)
                            data-field="chart.duplicate_rate" data-value=(json_text(&rate)) {
                            title {
                                (source) " · " (hour_label(&bucket.start)) " UTC: "
                                (Format::Percent.number(rate))
                            }
                        }
                    }
                }
                @if index % label_every == 0 {
                    text x=(Px(x0 + group / 2.0)) y=(Px(bottom + 18.0)) text-anchor="middle" {
                        (hour_label(&bucket.start))
                    }
                }
            }
            line x1=(left) y1=(Px(bottom)) x2=(right) y2=(Px(bottom)) stroke="#1d2330" {}
        }
    }
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
    fn axis(&self, top: f64, bottom: f64, format: Format) -> Markup {
        html! {
            @for tick in self.ticks() {
                @let x = Px(self.x(tick));
                line x1=(x) y1=(Px(top)) x2=(x) y2=(Px(bottom)) stroke="#dde1e8" {}
                text x=(x) y=(Px(bottom + 18.0)) text-anchor="middle" { (format.number(tick)) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use traqlyte_stats::{proportion_lift, ConfidenceLevel, Proportion};

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
        let lift = proportion_lift(
            Proportion::new(10, 100).unwrap(),
            Proportion::new(12, 100).unwrap(),
            ConfidenceLevel::default(),
        );
        let rows = [LiftRow {
            arm: "<b>t</b>",
            lift: Some(lift),
            naive_lift: None,
            predicted_naive_lift: None,
        }];
        let svg = lift_whiskers("m\"x", &rows).into_string();
        assert!(!svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;b&gt;t&lt;/b&gt;"));
        assert!(svg.contains("data-metric=\"m&quot;x\""));
        assert!(svg.contains("not defined"));
        // Empty SVG elements are closed explicitly: `<line>` is not void in HTML's SVG.
        assert!(!svg.contains("/>") && svg.contains("</line>"), "{svg}");
    }

    #[test]
    fn a_conversions_rate_and_naive_events_share_an_axis_of_plain_numbers() {
        let arm: traqlyte_experiments::report::WindowReport =
            serde_json::from_value(serde_json::json!({
                "kind": "conversion", "window_hours": 24, "units": 100, "value": 0.2,
                "naive_value": 0.3, "value_ci": {"low": 0.12, "high": 0.28},
                "stored_events": 20, "duplicates": 10, "delta": 0.5, "delta_value": null,
                "lift": null, "naive_lift": null, "predicted_naive_lift": null,
                "converters": 20
            }))
            .expect("a window report");
        let svg = value_whiskers("m", Format::Percent, Format::EventsPerUnit, &[("c", &arm)])
            .into_string();
        // Ticks are the SVG's `<text>` elements after the grid lines; none is a percent.
        let ticks: Vec<&str> = svg
            .split("text-anchor=\"middle\">")
            .skip(1)
            .map(|t| t.split('<').next().unwrap_or(""))
            .collect();
        assert!(!ticks.is_empty(), "{svg}");
        assert!(ticks.iter().all(|t| !t.contains('%')), "{ticks:?}");
        assert!(svg.contains("per unit"), "{svg}");
    }

    #[test]
    fn no_duplicates_is_said_in_words() {
        assert!(duplicates_over_time(&["c"], &[])
            .into_string()
            .contains("No duplicate"));
    }

    #[test]
    fn duplicate_bars_carry_their_counts() {
        let points = [DuplicateBucket {
            bucket_start: "2026-11-29T10:00:00.000000Z".into(),
            arm: "t<".into(),
            duplicates: 7,
        }];
        let svg = duplicates_over_time(&["c", "t<"], &points).into_string();
        assert!(
            svg.contains("data-arm=\"t&lt;\" data-field=\"chart.duplicates\" data-value=\"7\""),
            "{svg}"
        );
        assert!(svg.contains("2026-11-29 10:00"));
    }
}
