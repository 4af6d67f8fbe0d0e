//! Untrusted text shown back to the model: every fragment of input a refusal quotes (a tool name, a key, a
//! value, a serde message that quotes one) goes through [`fragment`] or [`message`], so a refusal stays
//! short whatever the input's size and one line per problem whatever characters the input holds.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The most characters of one echoed fragment; longer ones keep their start and end around an ellipsis.
pub(crate) const MAX_FRAGMENT_CHARS: usize = 64;

/// The most characters of one echoed message (a serde error text), after each quoted fragment in it is
/// capped.
pub(crate) const MAX_MESSAGE_CHARS: usize = 256;

/// The most characters of a phrase saying what a parameter expects, read from its schema (which an upstream MCP
/// server wrote: its enum values, keys and alternatives are shown as fragments, and the phrase is capped).
pub(crate) const MAX_PHRASE_CHARS: usize = 240;

/// A phrase read from a schema, capped at [`MAX_PHRASE_CHARS`] and escaped like a [`fragment`].
pub(crate) fn phrase(text: &str) -> Cow<'_, str> {
    capped(text, MAX_PHRASE_CHARS)
}

/// `text` as it may appear in a refusal: control, invisible and bidirectional characters escaped (`\n`,
/// `\u{2028}`, `\u{202e}`, ...), and at most [`MAX_FRAGMENT_CHARS`] characters, the middle replaced by `…` when longer.
pub(crate) fn fragment(text: &str) -> Cow<'_, str> {
    capped(text, MAX_FRAGMENT_CHARS)
}

/// A serde error text for a refusal: each quoted part (`"…"` or `` `…` ``) capped as a [`fragment`], then
/// the whole escaped and capped at [`MAX_MESSAGE_CHARS`].
pub(crate) fn message(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE_CHARS * 4));
    let mut rest = text;
    while let Some(start) = rest.find(['"', '`']) {
        let quote = rest[start..].chars().next().unwrap_or('"');
        out.push_str(&rest[..=start]);
        let after = &rest[start + 1..];
        let end = closing_quote(after, quote);
        match end {
            Some(end) => {
                out.push_str(&fragment(&after[..end]));
                out.push(quote);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&fragment(after));
                rest = "";
            }
        }
    }
    out.push_str(rest);
    capped(&out, MAX_MESSAGE_CHARS).into_owned()
}

/// The end of a quoted part: the next unescaped `"` (serde prints strings with `Debug` escapes), or the
/// next backtick.
fn closing_quote(text: &str, quote: char) -> Option<usize> {
    if quote == '`' {
        return text.find('`');
    }
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// What a human's screen must not get as itself: controls, and the invisible and bidirectional characters an
/// approver's display escapes too ([`is_hidden_char`](crate::approval::display::is_hidden_char)), so a key
/// spelt `admin\u{202e}` cannot reorder a log line or a host's list of stripped keys.
fn needs_escape(c: char) -> bool {
    if c.is_ascii() { c.is_ascii_control() } else { crate::approval::display::is_hidden_char(c) }
}

fn capped(text: &str, max: usize) -> Cow<'_, str> {
    // Fast path, the usual case: short and printable (printable ASCII read byte by byte, then any other text
    // character by character).
    if text.len() <= max && (text.bytes().all(|b| matches!(b, b' '..=b'~')) || !text.chars().any(needs_escape)) {
        return Cow::Borrowed(text);
    }
    let count = text.chars().count();
    let mut out = String::with_capacity(max * 2);
    if count <= max {
        push_escaped(&mut out, text.chars());
    } else {
        let head = (max - 1) / 2 + (max - 1) % 2;
        let tail = (max - 1) / 2;
        push_escaped(&mut out, text.chars().take(head));
        out.push('…');
        push_escaped(&mut out, text.chars().skip(count - tail));
    }
    Cow::Owned(out)
}

fn push_escaped(out: &mut String, chars: impl Iterator<Item = char>) {
    for c in chars {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_printable_text_is_unchanged() {
        assert!(matches!(fragment("address.zip"), Cow::Borrowed("address.zip")));
        assert_eq!(message("invalid type: string \"5\", expected u32"), "invalid type: string \"5\", expected u32");
    }

    #[test]
    fn long_text_keeps_both_ends_around_an_ellipsis() {
        let long = format!("start{}end", "x".repeat(10_000_000));
        let shown = fragment(&long);
        assert_eq!(shown.chars().count(), MAX_FRAGMENT_CHARS);
        assert!(shown.starts_with("start") && shown.ends_with("end") && shown.contains('…'), "{shown}");
        // Characters, not bytes: multi-byte text is cut on character boundaries.
        assert_eq!(fragment(&"é".repeat(1000)).chars().count(), MAX_FRAGMENT_CHARS);
    }

    #[test]
    fn control_characters_cannot_start_a_line() {
        let key = "a\n- `x` is required\r\u{1b}[2J\u{2028}";
        let shown = fragment(key);
        assert!(!shown.contains(['\n', '\r', '\u{1b}', '\u{2028}']), "{shown}");
        assert_eq!(shown, "a\\n- `x` is required\\r\\u{1b}[2J\\u{2028}");
    }

    #[test]
    fn invisible_and_bidirectional_characters_are_escaped() {
        assert_eq!(fragment("admin\u{202E}gpj.exe"), "admin\\u{202e}gpj.exe");
        assert_eq!(fragment("a\u{200B}b\u{2066}c\u{FEFF}\u{E0041}"), "a\\u{200b}b\\u{2066}c\\u{feff}\\u{e0041}");
        // Whatever the approver's display hides, a refusal escapes, and printable text is left alone.
        for c in [
            '\u{0}', '\u{7F}', '\u{85}', '\u{AD}', '\u{61C}', '\u{200F}', '\u{2029}', '\u{206F}', '\u{3164}',
            '\u{FE0F}',
        ] {
            assert!(crate::approval::display::is_hidden_char(c));
            assert!(!fragment(&format!("a{c}b")).contains(c), "{c:?}");
        }
        assert!(matches!(fragment("naïve café 東京 ß"), Cow::Borrowed(_)));
    }

    proptest::proptest! {
        /// Nothing an approver's display hides survives into a fragment or a message, whatever the text holds.
        #[test]
        fn no_hidden_character_survives_an_echo(text in "(\\PC|\\p{Cc}|\\p{Cf}|[\u{2028}\u{2029}\u{3164}\u{FE00}-\u{FE0F}]|\"){0,80}") {
            let hidden = |shown: &str| shown.chars().find(|&c| crate::approval::display::is_hidden_char(c));
            proptest::prop_assert_eq!(hidden(&fragment(&text)), None, "{:?}", text);
            proptest::prop_assert_eq!(hidden(&message(&text)), None, "{:?}", text);
        }
    }

    #[test]
    fn a_message_caps_each_quoted_value_and_keeps_what_was_expected() {
        let huge = "9".repeat(20_000_000);
        let text = message(&format!("invalid type: string \"{huge}\", expected u32"));
        assert!(text.len() < 200, "{text}");
        assert!(text.starts_with("invalid type: string \"999") && text.ends_with("\", expected u32"), "{text}");
        let variant = message(&format!("unknown variant `{}\nx`, expected `red` or `green`", "v".repeat(500)));
        assert!(variant.ends_with("expected `red` or `green`") && !variant.contains('\n'), "{variant}");
        // Escaped quotes inside a Debug-printed string do not end it early.
        assert_eq!(message(r#"string "a\"b", expected u8"#), r#"string "a\"b", expected u8"#);
        // An unterminated quote is still capped, and the whole message has a ceiling.
        assert!(message(&format!("`{}", "y".repeat(1000))).chars().count() <= MAX_FRAGMENT_CHARS + 1);
        assert!(message(&"z ".repeat(100_000)).chars().count() <= MAX_MESSAGE_CHARS);
    }
}
