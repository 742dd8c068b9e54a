//! RFC 3339 timestamps to microseconds since the Unix epoch.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Parses an RFC 3339 timestamp that carries a UTC offset into microseconds since the
/// Unix epoch (UTC). Returns the parser's reason on failure.
pub fn parse_rfc3339_micros(text: &str) -> Result<i64, String> {
    let parsed = OffsetDateTime::parse(text, &Rfc3339).map_err(|err| err.to_string())?;
    let micros = parsed.unix_timestamp_nanos() / 1_000;
    i64::try_from(micros).map_err(|_| "timestamp out of range".to_string())
}

/// Formats microseconds since the Unix epoch as RFC 3339 in UTC with microseconds
/// (`2026-11-29T12:00:00.000000Z`).
pub fn format_rfc3339_micros(micros: i64) -> String {
    let nanos = i128::from(micros) * 1_000;
    let Ok(at) = OffsetDateTime::from_unix_timestamp_nanos(nanos) else {
        return String::from("out-of-range");
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.microsecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_converted_to_utc() {
        let utc = parse_rfc3339_micros("2026-11-29T12:00:00Z").unwrap();
        let paris = parse_rfc3339_micros("2026-11-29T13:00:00+01:00").unwrap();
        assert_eq!(utc, paris);
        assert_eq!(utc, 1_795_953_600_000_000);
    }

    #[test]
    fn formatting_round_trips_through_parsing() {
        let micros = 1_795_953_600_123_456;
        assert_eq!(format_rfc3339_micros(micros), "2026-11-29T12:00:00.123456Z");
        assert_eq!(
            parse_rfc3339_micros(&format_rfc3339_micros(micros)),
            Ok(micros)
        );
    }

    #[test]
    fn a_timestamp_without_offset_is_refused() {
        assert!(parse_rfc3339_micros("2026-11-29T12:00:00").is_err());
    }
}
