//! HTML building blocks: escaping, deterministic number formats, the page layout.
//!
//! Plain `format!` with one escaping helper ([`esc`]) rather than `maud` or `askama`: the
//! UI is four small pages, the user-controlled strings are few and known (campaign
//! names and keys, arm keys, metric names, verdict sentences that embed them), and every
//! one of them goes through [`esc`] at the point it is interpolated. That costs no
//! dependency and no proc-macro build time; numbers are formatted here into ASCII that
//! needs no escaping. Defence in depth: pages are served with a CSP that forbids every
//! script (`ui::html_response`), so a missed escape could not execute code.

use serde_json::Value;

/// Escapes text for HTML element content and double- or single-quoted attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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

/// What a missing (`null`) number is shown as.
pub(crate) const MISSING: &str = "—";

/// The deterministic text formats of every number on the pages. Each takes the JSON
/// value the report holds, so the page shows exactly the report's numbers.
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
    /// A count, rounded to an integer, thousands separated by commas: `12,345`.
    Count,
    /// An expected count, one decimal, thousands separated: `1,234.5`.
    Expected,
}

impl Format {
    /// The text for a JSON value; [`MISSING`] for `null` or anything not a number.
    pub(crate) fn apply(self, value: &Value) -> String {
        match value.as_f64() {
            Some(x) => self.number(x),
            None => MISSING.to_string(),
        }
    }

    /// The text for a number.
    pub(crate) fn number(self, x: f64) -> String {
        match self {
            Format::SignedPercent => format!("{:+.2}%", x * 100.0),
            Format::Percent => format!("{:.2}%", x * 100.0),
            Format::PValue if x < 0.0001 => "< 0.0001".to_string(),
            Format::PValue => format!("{x:.4}"),
            Format::Decimal => format!("{x:.4}"),
            Format::Count => group_thousands(&format!("{x:.0}")),
            Format::Expected => group_thousands(&format!("{x:.1}")),
        }
    }
}

/// Commas between thousands of the integer part of a formatted number.
fn group_thousands(number: &str) -> String {
    let (sign, unsigned) = match number.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", number),
    };
    let (digits, fraction) = match unsigned.split_once('.') {
        Some((digits, fraction)) => (digits, format!(".{fraction}")),
        None => (unsigned, String::new()),
    };
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, c) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}{fraction}")
}

/// Where a number on the page comes from, written as `data-*` attributes so a test (or
/// a scraper) can compare the shown text with the raw value: `data-metric`, `data-arm`,
/// `data-field`, and `data-value` holding the report's JSON text of the value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub metric: Option<&'a str>,
    pub arm: Option<&'a str>,
    pub field: &'a str,
}

impl Source<'_> {
    /// The attributes, escaped, with a leading space.
    pub(crate) fn attributes(&self, value: &Value) -> String {
        let mut out = String::new();
        if let Some(metric) = self.metric {
            out.push_str(&format!(" data-metric=\"{}\"", esc(metric)));
        }
        if let Some(arm) = self.arm {
            out.push_str(&format!(" data-arm=\"{}\"", esc(arm)));
        }
        out.push_str(&format!(
            " data-field=\"{}\" data-value=\"{}\"",
            esc(self.field),
            esc(&value.to_string())
        ));
        out
    }
}

/// A table cell holding one number, with its source attributes.
pub(crate) fn number_cell(source: Source<'_>, value: &Value, format: Format) -> String {
    format!(
        "<td class=\"num\"{}>{}</td>",
        source.attributes(value),
        format.apply(value)
    )
}

/// A whole page: the layout around `body`, with the inline style sheet.
pub(crate) fn page(title: &str, logged_in: bool, body: &str) -> String {
    let nav = if logged_in {
        "<nav><a href=\"/ui/campaigns\">Campaigns</a>\
         <form method=\"post\" action=\"/ui/logout\"><button type=\"submit\">Log out</button></form></nav>"
    } else {
        ""
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · TraqLyte</title><style>{STYLE}</style></head>\
         <body><header><a class=\"brand\" href=\"/ui/campaigns\">TraqLyte</a>{nav}</header>\
         <main>{body}</main></body></html>\n",
        title = esc(title),
    )
}

const STYLE: &str = "
:root{--ink:#1d2330;--muted:#5b6475;--line:#dde1e8;--bg:#f6f7f9;--accent:#1f5fbf;--warn:#b3261e;--ok:#1e7d3a}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--ink);background:var(--bg)}
header{display:flex;align-items:center;justify-content:space-between;padding:.6rem 1.5rem;background:#fff;border-bottom:1px solid var(--line)}
header .brand{font-weight:700;color:var(--ink);text-decoration:none}
nav{display:flex;gap:1rem;align-items:center}
nav form{margin:0}
main{max-width:1280px;margin:0 auto;padding:1.5rem}
h1{font-size:1.6rem;margin:.2rem 0}
h2{font-size:1.25rem;margin:0 0 .5rem}
h3{font-size:1rem;margin:1rem 0 .4rem;color:var(--muted)}
.meta{color:var(--muted);margin:.2rem 0 1rem}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:1rem 1.25rem;margin:0 0 1.25rem}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:.95rem}
th,td{padding:.35rem .55rem;border-bottom:1px solid var(--line);text-align:left;white-space:nowrap}
th{font-weight:600;color:var(--muted);font-size:.85rem}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.ctl{text-align:center;color:var(--muted)}
.verdict{border-left:4px solid var(--warn);background:#fdf1f0;padding:.6rem .9rem;margin:.4rem 0;border-radius:4px}
.verdict.calm{border-color:var(--ok);background:#eef7f0}
.badge{display:inline-block;padding:.05rem .5rem;border-radius:999px;font-size:.85rem;font-weight:600}
.badge.bad{background:#fdf1f0;color:var(--warn)}
.badge.good{background:#eef7f0;color:var(--ok)}
.chart{max-width:820px}
svg{width:100%;height:auto;display:block}
svg text{font:12px system-ui,sans-serif;fill:var(--muted)}
.legend{font-size:.85rem;color:var(--muted)}
.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin:0 .3rem 0 .8rem;vertical-align:-1px}
form.login{display:flex;flex-direction:column;gap:.6rem;max-width:32rem}
input[type=password]{font:inherit;padding:.45rem .6rem;border:1px solid var(--line);border-radius:6px}
button{font:inherit;padding:.35rem .9rem;border:1px solid var(--accent);background:var(--accent);color:#fff;border-radius:6px;cursor:pointer}
nav button{background:#fff;color:var(--accent)}
.error{color:var(--warn)}
a{color:var(--accent)}
";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn escaping_neutralises_markup_in_text_and_attributes() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn numbers_have_one_text_each() {
        let cases = [
            (Format::SignedPercent, json!(0.012345), "+1.23%"),
            (Format::SignedPercent, json!(-0.5), "-50.00%"),
            (Format::Percent, json!(0.1), "10.00%"),
            (Format::PValue, json!(0.04999), "0.0500"),
            (Format::PValue, json!(0.00001), "< 0.0001"),
            (Format::Decimal, json!(1.5), "1.5000"),
            (Format::Count, json!(1234567.0), "1,234,567"),
            (Format::Count, json!(999), "999"),
            (Format::Count, json!(-1000), "-1,000"),
            (Format::Expected, json!(1234.56), "1,234.6"),
            (Format::Decimal, Value::Null, MISSING),
        ];
        for (format, value, text) in cases {
            assert_eq!(format.apply(&value), text, "{format:?} {value}");
        }
    }

    #[test]
    fn query_components_are_percent_encoded() {
        assert_eq!(url_component("/ui/a b?&"), "/ui/a%20b%3F%26");
    }
}
