//! What every command prints with: JSON for programs, times for people.

use std::fmt::Write as _;
use std::time::Duration;

use agent_airlock::approval::display::is_hidden_char;
use serde_json::Value;

pub(crate) fn print_json(value: &Value) {
    println!("{}", json_text(value));
}

/// `value` as pretty JSON with every character an approver's display hides (bidi controls, zero-width and C1
/// characters, which JSON may carry as themselves) written as a `\u` escape: the same JSON to a program, and
/// nothing a model spelt into a tool name or a key can reorder or drive the terminal it is printed on.
fn json_text(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    // serde_json escapes C0 controls in strings itself (the line breaks left are its own whitespace) but writes
    // the others as they are, and only inside strings, where a `\u` escape means the same character.
    let hidden = |c: char| c == '\u{7F}' || (!c.is_ascii() && is_hidden_char(c));
    if !text.chars().any(hidden) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 32);
    for c in text.chars() {
        if hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
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
    fn json_output_escapes_what_a_terminal_would_hide_and_means_the_same() {
        let value = serde_json::json!({
            "tool": "read\u{202E}txt.exe",
            "detail": "a\u{9B}2Jb\u{200B}c\u{E0041}\u{7F}",
            "plain": "café 東京",
            "nested": [{"k\u{2066}": 1}],
        });
        let text = json_text(&value);
        assert!(!text.chars().any(|c| c != '\n' && is_hidden_char(c)), "{text}");
        assert!(text.contains("read\\u202etxt.exe") && text.contains("\\udb40\\udc41"), "{text}");
        assert!(text.contains("café 東京"), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap_or_default(), value);
        let plain = serde_json::json!({"a": "b"});
        assert_eq!(json_text(&plain), serde_json::to_string_pretty(&plain).unwrap_or_default());
    }

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
