//! What every command prints with: JSON for programs, times for people.

use std::time::Duration;

use serde_json::Value;

pub(crate) fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

/// A time for a person to read: RFC 3339 in UTC and how long ago (or how far ahead) it is, e.g.
/// `2026-12-01T19:40:12Z, 3 min ago`. `--json` keeps the numbers.
pub(crate) fn when(now: Duration, at: Duration) -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + at);
    let (span, ahead) = match now.checked_sub(at) {
        Some(past) => (past, false),
        None => (at.saturating_sub(now), true),
    };
    let secs = span.as_secs();
    let age = match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    };
    if ahead { format!("{stamp}, in {age}") } else { format!("{stamp}, {age} ago") }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc_3339_in_utc_with_their_age() {
        let at = Duration::from_secs(1_796_153_379);
        assert_eq!(when(at + Duration::from_secs(200), at), "2026-12-01T19:29:39Z, 3 min ago");
        assert_eq!(when(at, at), "2026-12-01T19:29:39Z, 0 s ago");
        assert_eq!(when(at + Duration::from_secs(7200), at), "2026-12-01T19:29:39Z, 2 h ago");
        assert_eq!(when(at + Duration::from_secs(3 * 86_400), at), "2026-12-01T19:29:39Z, 3 days ago");
        assert_eq!(when(at, at + Duration::from_secs(90)), "2026-12-01T19:31:09Z, in 1 min");
    }
}
