//! HTML building blocks: deterministic number formats, the `data-*` provenance of every
//! number, and the page layout.
//!
//! Markup is written with `maud`: the templates are checked at compile time and every
//! value interpolated into them is escaped by its type (a `&str` or `String` is text, so
//! a campaign name, arm key, metric name or verdict sentence can never become markup).
//! Nothing on the pages is escaped by hand. The one `PreEscaped` is [`STYLE`], a
//! constant without interpolation. Defence in depth: pages are served with a CSP that
//! forbids every script (`ui::html_response`), so even a template bug could not execute
//! code.

use maud::{html, Markup, PreEscaped, Render, DOCTYPE};
use serde::Serialize;

/// Percent-encodes a query-string component (RFC 3986 unreserved characters kept).
pub(crate) fn url_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a missing number is shown as.
pub(crate) const MISSING: &str = "—";

/// The deterministic text formats of every number on the pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// A relative lift as a signed percentage with two decimals: `+1.23%`.
    SignedPercent,
    /// A rate as a percentage with two decimals: `4.56%`.
    Percent,
    /// A p-value with four decimals, `< 0.0001` below that.
    PValue,
    /// A per-unit value with four decimals: `0.1234`.
    Decimal,
    /// Deliveries per unit with two decimals and the unit: `1.03 events/unit`. A naive
    /// "conversion" counts every delivery, so it is a rate of events, not of units, and
    /// can exceed one: a percentage would read as more than 100% of units converting.
    EventsPerUnit,
    /// A count, rounded to an integer, thousands separated by commas: `12,345`. Also
    /// expected counts (the exact value stays in `data-value`).
    Count,
}

impl Format {
    /// The text for an optional number; [`MISSING`] for `None` or a non-finite one.
    pub(crate) fn opt(self, value: Option<f64>) -> String {
        match value {
            Some(x) if x.is_finite() => self.number(x),
            _ => MISSING.to_string(),
        }
    }

    /// The text for a number.
    pub(crate) fn number(self, x: f64) -> String {
        match self {
            Format::SignedPercent => format!("{}%", fixed_or_significant(x * 100.0, 2, true)),
            Format::Percent => format!("{}%", fixed_or_significant(x * 100.0, 2, false)),
            Format::PValue if x < 0.0001 => "< 0.0001".to_string(),
            Format::PValue => format!("{x:.4}"),
            Format::Decimal => fixed_or_significant(x, 4, false),
            Format::EventsPerUnit => format!("{x:.2} events/unit"),
            Format::Count => group_thousands(&format!("{x:.0}")),
        }
    }
}

/// `x` with `decimals` decimals (and its sign, `+` too, when `signed`), the thousands of
/// its integer part separated by commas, unless those decimals would show a number that
/// is not zero as zero: then with three significant digits (`0.000152`), or in scientific
/// notation below 10⁻¹⁰ (`1.50e-15`). A lift of +0.00094 % or a value per unit of 1.5e-7
/// read "+0.00%" and "0.0000" beside a significant p-value.
fn fixed_or_significant(x: f64, decimals: usize, signed: bool) -> String {
    let shown_as_zero = x != 0.0 && x.abs() < 0.5 * 10f64.powi(-(decimals as i32));
    let places = if shown_as_zero {
        // The first significant digit's place after the point, and two more.
        (-x.abs().log10()).ceil() as usize + 2
    } else {
        decimals
    };
    // `+` where `{:+}` writes it: before a positive number and +0.
    let plus = if signed && x.is_sign_positive() {
        "+"
    } else {
        ""
    };
    if places > 12 {
        return format!("{plus}{x:.2e}");
    }
    let text = format!("{x:.places$}");
    let (minus, digits) = text.split_at(usize::from(text.starts_with('-')));
    match digits.split_once('.') {
        Some((whole, fraction)) => format!("{plus}{minus}{}.{fraction}", group_thousands(whole)),
        None => format!("{plus}{minus}{}", group_thousands(digits)),
    }
}

/// Commas between thousands of a formatted integer.
fn group_thousands(number: &str) -> String {
    let (sign, digits) = match number.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", number),
    };
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    out.push_str(sign);
    for (index, c) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A number as the JSON report writes it: the text of `data-value`, so a test (or a
/// scraper) can compare the page with `GET /campaigns/{id}/report` exactly. `null` for
/// `None`; serde_json's float text, which is the API's.
pub(crate) fn json_text<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

/// Where a number on the page comes from, written as `data-*` attributes: `data-metric`,
/// `data-arm`, `data-field` (the report's field path, e.g. `lift.ci_low`), and
/// `data-value` holding the report's JSON text of the value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub metric: Option<&'a str>,
    pub arm: Option<&'a str>,
    pub field: &'a str,
}

impl Source<'_> {
    /// A table cell showing `value` in `format`; `label` names the column on narrow
    /// screens, where the table's rows are stacked as cards.
    pub(crate) fn cell(&self, label: &str, value: Option<f64>, format: Format) -> Markup {
        html! {
            td.num data-label=(label) data-metric=[self.metric] data-arm=[self.arm]
                data-field=(self.field) data-value=(json_text(&value)) { (format.opt(value)) }
        }
    }

    /// An inline number.
    pub(crate) fn span(&self, value: Option<f64>, format: Format) -> Markup {
        html! {
            span data-metric=[self.metric] data-arm=[self.arm] data-field=(self.field)
                data-value=(json_text(&value)) { (format.opt(value)) }
        }
    }

    /// A count cell (an integer of the report).
    pub(crate) fn count_cell(&self, label: &str, value: u64) -> Markup {
        html! {
            td.num data-label=(label) data-metric=[self.metric] data-arm=[self.arm]
                data-field=(self.field) data-value=(value) { (Format::Count.number(value as f64)) }
        }
    }
}

/// A pixel coordinate, written with one decimal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Px(pub f64);

impl Render for Px {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&format!("{:.1}", self.0));
    }
}

/// What a page's header shows of who is looking.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Viewer<'a> {
    /// Nobody logged in: no navigation.
    Anonymous,
    /// A session whose tenant this page does not know (an error page): navigation only.
    LoggedIn,
    /// A session of the tenant named: navigation and the name, so a browser put into
    /// another tenant's session (a login link someone else minted) shows it on every page.
    Tenant(&'a str),
}

/// A whole page: the layout around `body`, with the inline style sheet.
pub(crate) fn page(title: &str, viewer: Viewer<'_>, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · TraqLyte" }
                // A constant without interpolation: nothing user-controlled passes here.
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a.brand href="/ui/campaigns" { "TraqLyte" }
                    @if !matches!(viewer, Viewer::Anonymous) {
                        nav {
                            @if let Viewer::Tenant(name) = viewer {
                                span.tenant data-field="tenant" { "Tenant " b { (name) } }
                            }
                            a href="/ui/campaigns" { "Campaigns" }
                            " "
                            a href="/ui/ops" { "Operations" }
                            form method="post" action="/ui/logout" {
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
    .into_string()
}

/// Narrow screens (a phone is 360–430 px wide): below this, tables marked `.cards` stack
/// each row as a card of label/value lines instead of scrolling sideways.
const STYLE: &str = "
:root{--ink:#1d2330;--muted:#5b6475;--line:#dde1e8;--bg:#f6f7f9;--accent:#1f5fbf;--warn:#b3261e;--ok:#1e7d3a}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--ink);background:var(--bg)}
header{display:flex;align-items:center;justify-content:space-between;padding:.6rem 1.5rem;background:#fff;border-bottom:1px solid var(--line)}
header .brand{font-weight:700;color:var(--ink);text-decoration:none}
nav{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;min-width:0}
nav form{margin:0}
nav .tenant{color:var(--muted);overflow-wrap:anywhere}
main{max-width:1280px;margin:0 auto;padding:1.5rem}
h1{font-size:1.6rem;margin:.2rem 0;overflow-wrap:anywhere}
h2{font-size:1.25rem;margin:0 0 .5rem;overflow-wrap:anywhere}
h3{font-size:1rem;margin:1rem 0 .4rem;color:var(--muted)}
.meta{color:var(--muted);margin:.2rem 0 1rem;overflow-wrap:anywhere}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:1rem 1.25rem;margin:0 0 1.25rem}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{padding:.35rem .45rem;border-bottom:1px solid var(--line);text-align:left}
td{white-space:nowrap}
th{font-weight:600;color:var(--muted);font-size:.8rem;vertical-align:bottom}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.ctl{text-align:center;color:var(--muted)}
.verdict{border-left:4px solid var(--warn);background:#fdf1f0;padding:.6rem .9rem;margin:.4rem 0;border-radius:4px;overflow-wrap:anywhere}
.verdict.calm{border-color:var(--ok);background:#eef7f0}
.badge{display:inline-block;padding:.05rem .5rem;border-radius:999px;font-size:.85rem;font-weight:600}
.badge.bad{background:#fdf1f0;color:var(--warn)}
.badge.good{background:#eef7f0;color:var(--ok)}
.chart{max-width:820px}
svg{width:100%;height:auto;display:block}
svg text{font:12px system-ui,sans-serif;fill:var(--muted)}
.legend{font-size:.85rem;color:var(--muted);overflow-wrap:anywhere}
td.head{white-space:normal;overflow-wrap:anywhere}
.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin:0 .3rem 0 .8rem;vertical-align:-1px}
.swatch.ring{border:1.5px solid #5b6475}
form.login{display:flex;flex-direction:column;gap:.6rem;max-width:32rem}
input[type=password]{font:inherit;padding:.45rem .6rem;border:1px solid var(--line);border-radius:6px}
button{font:inherit;padding:.35rem .9rem;border:1px solid var(--accent);background:var(--accent);color:#fff;border-radius:6px;cursor:pointer}
nav button{background:#fff;color:var(--accent)}
.error{color:var(--warn)}
a{color:var(--accent)}
@media (max-width:720px){
header{padding:.5rem .75rem}
main{padding:.75rem}
section{padding:.75rem}
table.cards thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:100%}
table.cards tr{border:1px solid var(--line);border-radius:6px;margin:0 0 .6rem;padding:.2rem .5rem}
table.cards td{border:0;padding:.15rem 0;text-align:right;white-space:normal;overflow-wrap:anywhere}
table.cards td::before{content:attr(data-label);float:left;margin-right:.75rem;color:var(--muted);font-weight:600;text-align:left}
table.cards td.head{text-align:left;font-weight:700}
table.cards td.ctl{text-align:right}
}
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_one_text_each() {
        let cases = [
            (Format::SignedPercent, Some(0.012345), "+1.23%"),
            (Format::SignedPercent, Some(-0.5), "-50.00%"),
            (Format::Percent, Some(0.1), "10.00%"),
            (Format::PValue, Some(0.04999), "0.0500"),
            (Format::PValue, Some(0.00001), "< 0.0001"),
            (Format::Decimal, Some(1.5), "1.5000"),
            (Format::EventsPerUnit, Some(1.0333), "1.03 events/unit"),
            (Format::Count, Some(1234567.0), "1,234,567"),
            (Format::Count, Some(999.0), "999"),
            (Format::Count, Some(-1000.0), "-1,000"),
            (Format::Count, Some(149.5001), "150"),
            // A figure that is not zero never reads as zero, and large ones are grouped.
            (Format::SignedPercent, Some(9.4e-6), "+0.000940%"),
            (Format::SignedPercent, Some(-0.00004), "-0.00400%"),
            (Format::SignedPercent, Some(0.0), "+0.00%"),
            (Format::SignedPercent, Some(123.456), "+12,345.60%"),
            (Format::Percent, Some(0.00001234), "0.00123%"),
            (Format::Decimal, Some(1.5e-7), "0.000000150"),
            (Format::Decimal, Some(-0.00003), "-0.0000300"),
            (Format::Decimal, Some(1.5e-15), "1.50e-15"),
            (Format::SignedPercent, Some(1.5e-15), "+1.50e-13%"),
            (Format::Decimal, Some(1_234_567.25), "1,234,567.2500"),
            (Format::Decimal, Some(-12345.5), "-12,345.5000"),
            (Format::Decimal, None, MISSING),
            (Format::Decimal, Some(f64::NAN), MISSING),
        ];
        for (format, value, text) in cases {
            assert_eq!(format.opt(value), text, "{format:?} {value:?}");
        }
    }

    #[test]
    fn data_values_are_the_json_text_of_the_report() {
        assert_eq!(json_text(&Some(0.1_f64)), "0.1");
        assert_eq!(json_text(&Some(1.0_f64)), "1.0");
        assert_eq!(json_text(&None::<f64>), "null");
        let source = Source {
            metric: Some("m\"<"),
            arm: None,
            field: "value",
        };
        let cell = source
            .cell("Value", Some(0.25), Format::Percent)
            .into_string();
        assert_eq!(
            cell,
            "<td class=\"num\" data-label=\"Value\" data-metric=\"m&quot;&lt;\" data-field=\"value\" data-value=\"0.25\">25.00%</td>"
        );
    }

    #[test]
    fn the_style_sheet_cannot_close_its_element() {
        assert!(!STYLE.contains('<'), "STYLE is emitted unescaped");
    }

    #[test]
    fn titles_are_text() {
        let html = page("<b>x</b>", Viewer::Anonymous, html! { p { "body" } });
        assert!(html.contains("<title>&lt;b&gt;x&lt;/b&gt; · TraqLyte</title>"));
        assert!(html.starts_with("<!DOCTYPE html>"));
    }

    #[test]
    fn query_components_are_percent_encoded() {
        assert_eq!(url_component("/ui/a b?&"), "/ui/a%20b%3F%26");
    }
}
