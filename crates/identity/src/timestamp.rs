//! RFC 3339 timestamps to microseconds since the Unix epoch.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z in microseconds since the epoch:
/// the instants an RFC 3339 timestamp in UTC can write.
const RFC3339_FIRST_US: i64 = -62_135_596_800_000_000;
const RFC3339_LAST_US: i64 = 253_402_300_799_999_999;

/// Whether an RFC 3339 timestamp in UTC can write the instant `micros` (years 0001–9999).
pub fn writable_in_rfc3339(micros: i64) -> bool {
    (RFC3339_FIRST_US..=RFC3339_LAST_US).contains(&micros)
}

/// Parses an RFC 3339 timestamp that carries a UTC offset into microseconds since the
/// Unix epoch (UTC), rounded down. Returns the parser's reason on failure, and refuses an
/// instant outside the years 0001–9999 in UTC (`9999-12-31T23:00:00-02:00` is one): it
/// has no RFC 3339 form of its own, and two of them would share one canonical text.
pub fn parse_rfc3339_micros(text: &str) -> Result<i64, String> {
    // The `time` crate takes any one byte between the date and the time (`X`, `:`, a
    // newline, NUL, a digit: `2026-12-06512:00:00Z` was read as noon); RFC 3339 writes
    // `T` (any case) and allows a space.
    if !matches!(text.as_bytes().get(10), None | Some(b'T' | b't' | b' ')) {
        return Err("the date and the time must be separated by `T` (or a space)".to_string());
    }
    let parsed = OffsetDateTime::parse(text, &Rfc3339).map_err(|err| err.to_string())?;
    // Floor, not truncation toward zero: before 1970 a fraction of a microsecond must
    // not move an instant into the next microsecond (or the next day).
    let micros = parsed.unix_timestamp_nanos().div_euclid(1_000);
    i64::try_from(micros)
        .ok()
        .filter(|m| writable_in_rfc3339(*m))
        .ok_or_else(|| {
            "the instant in UTC falls outside the years 0001 to 9999, which RFC 3339 cannot write"
                .to_string()
        })
}

/// Formats microseconds since the Unix epoch as RFC 3339 in UTC with microseconds
/// (`2026-11-29T12:00:00.000000Z`).
pub fn format_rfc3339_micros(micros: i64) -> String {
    let nanos = i128::from(micros) * 1_000;
    let Ok(at) = OffsetDateTime::from_unix_timestamp_nanos(nanos) else {
        return String::from("out-of-range");
    };
    let Some(year) = u32::try_from(at.year()).ok().filter(|&y| y <= 9999) else {
        return padded(at);
    };
    // Written digit by digit: `format!` with padded fields was most of a Segment
    // message's stored-payload cost (two of these a message; `bench segment`).
    let mut out = [0u8; 27];
    let fields: [(u32, usize, u8); 7] = [
        (year, 4, b'-'),
        (u32::from(u8::from(at.month())), 2, b'-'),
        (u32::from(at.day()), 2, b'T'),
        (u32::from(at.hour()), 2, b':'),
        (u32::from(at.minute()), 2, b':'),
        (u32::from(at.second()), 2, b'.'),
        (at.microsecond(), 6, b'Z'),
    ];
    let mut end = 0;
    for (value, width, separator) in fields {
        let mut rest = value;
        for slot in out[end..end + width].iter_mut().rev() {
            *slot = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        out[end + width] = separator;
        end += width + 1;
    }
    // Only ASCII digits and separators were written.
    String::from_utf8_lossy(&out[..end]).into_owned()
}

/// The same text through `format!`'s padded fields: years outside 0–9999, and the
/// reference the digit-by-digit writer is tested against.
fn padded(at: OffsetDateTime) -> String {
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
    fn the_date_and_the_time_are_separated_by_t_or_a_space_only() {
        let noon = Ok(1_795_953_600_000_000);
        for separator in ["T", "t", " "] {
            let text = format!("2026-11-29{separator}12:00:00Z");
            assert_eq!(parse_rfc3339_micros(&text), noon, "{text:?}");
        }
        for separator in ["X", ":", "\n", "\0", "5", "_"] {
            let text = format!("2026-11-29{separator}12:00:00Z");
            assert!(parse_rfc3339_micros(&text).is_err(), "{text:?}");
        }
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
    fn digit_by_digit_formatting_equals_the_padded_format() {
        let padded = |micros: i64| {
            padded(
                OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
                    .expect("in range"),
            )
        };
        let mut micros = -62_135_596_800_000_000; // 0001-01-01
        while micros < 253_402_300_799_999_999 {
            // to 9999-12-31, in steps that move every field
            assert_eq!(format_rfc3339_micros(micros), padded(micros), "{micros}");
            micros += 3_911_234_567_891;
        }
        for micros in [
            -1,
            0,
            1,
            999_999,
            1_795_953_600_123_456,
            253_402_300_799_999_999,
        ] {
            assert_eq!(format_rfc3339_micros(micros), padded(micros), "{micros}");
        }
        assert_eq!(format_rfc3339_micros(-1), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn a_timestamp_without_offset_is_refused() {
        assert!(parse_rfc3339_micros("2026-11-29T12:00:00").is_err());
    }
}
