//! The `effect = "refund:{payment_id}"` template grammar: literal text and `{parameter}` placeholders.

use std::fmt;

/// One piece of a template, borrowed from the template's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text copied into the key.
    Literal(&'a str),
    /// The name of a parameter whose value goes into the key (spaces inside the braces trimmed).
    Param(&'a str),
}

/// A template that does not parse; its `Display` is the complete, user-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectTemplateError {
    /// The template is empty or blank.
    Empty,
    /// A `{` inside a placeholder.
    Nested {
        /// Byte offset of the placeholder's `{`.
        at: usize,
    },
    /// A `{` never closed.
    Unclosed {
        /// Byte offset of the `{`.
        at: usize,
    },
    /// A `}` with no `{`.
    Unmatched {
        /// Byte offset of the `}`.
        at: usize,
    },
    /// `{}` names no parameter.
    EmptyPlaceholder,
    /// No placeholder at all: every call would share one key.
    NoPlaceholder,
}

impl fmt::Display for EffectTemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EffectTemplateError::Empty => {
                f.write_str("`effect` must not be empty: give an idempotency key such as `\"refund:{payment_id}\"`")
            }
            EffectTemplateError::Nested { at } => write!(f, "nested `{{` in effect template at byte {at}"),
            EffectTemplateError::Unclosed { at } => write!(f, "unclosed `{{` in effect template at byte {at}"),
            EffectTemplateError::Unmatched { at } => write!(f, "unmatched `}}` in effect template at byte {at}"),
            EffectTemplateError::EmptyPlaceholder => {
                f.write_str("empty `{}` in effect template: name a parameter, e.g. `{payment_id}`")
            }
            EffectTemplateError::NoPlaceholder => {
                f.write_str("an effect template needs at least one `{parameter}`, or every call would share one key")
            }
        }
    }
}

impl std::error::Error for EffectTemplateError {}

/// Parses a template into its segments, in order; adjacent literal text is one segment.
pub fn parse_effect_template(template: &str) -> Result<Vec<Segment<'_>>, EffectTemplateError> {
    if template.trim().is_empty() {
        return Err(EffectTemplateError::Empty);
    }
    let mut segments = Vec::new();
    let mut literal_start = 0;
    let mut chars = template.char_indices();
    while let Some((start, c)) = chars.next() {
        match c {
            '{' => {
                let mut end = None;
                for (at, c) in chars.by_ref() {
                    match c {
                        '}' => {
                            end = Some(at);
                            break;
                        }
                        '{' => return Err(EffectTemplateError::Nested { at: start }),
                        _ => {}
                    }
                }
                let Some(end) = end else { return Err(EffectTemplateError::Unclosed { at: start }) };
                let name = template[start + 1..end].trim();
                if name.is_empty() {
                    return Err(EffectTemplateError::EmptyPlaceholder);
                }
                if literal_start < start {
                    segments.push(Segment::Literal(&template[literal_start..start]));
                }
                segments.push(Segment::Param(name));
                literal_start = end + 1;
            }
            '}' => return Err(EffectTemplateError::Unmatched { at: start }),
            _ => {}
        }
    }
    if literal_start < template.len() {
        segments.push(Segment::Literal(&template[literal_start..]));
    }
    if !segments.iter().any(|s| matches!(s, Segment::Param(_))) {
        return Err(EffectTemplateError::NoPlaceholder);
    }
    Ok(segments)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    #[test]
    fn parses_literals_and_params() {
        assert_eq!(
            parse_effect_template("refund:{payment_id}/{ amount }").unwrap(),
            vec![
                Segment::Literal("refund:"),
                Segment::Param("payment_id"),
                Segment::Literal("/"),
                Segment::Param("amount"),
            ]
        );
        assert_eq!(
            parse_effect_template("{a}{b}é").unwrap(),
            vec![Segment::Param("a"), Segment::Param("b"), Segment::Literal("é")]
        );
    }

    #[test]
    fn rejects_each_malformed_template() {
        let err = |t| parse_effect_template(t).unwrap_err();
        assert_eq!(err(""), EffectTemplateError::Empty);
        assert_eq!(err("  "), EffectTemplateError::Empty);
        assert_eq!(err("refund:{id"), EffectTemplateError::Unclosed { at: 7 });
        assert_eq!(err("refund:id}"), EffectTemplateError::Unmatched { at: 9 });
        assert_eq!(err("refund:{ }"), EffectTemplateError::EmptyPlaceholder);
        assert_eq!(err("refund:{a{b}}"), EffectTemplateError::Nested { at: 7 });
        assert_eq!(err("refund"), EffectTemplateError::NoPlaceholder);
        assert_eq!(err("refund:{id").to_string(), "unclosed `{` in effect template at byte 7");
        assert!(err("").to_string().starts_with("`effect` must not be empty"));
    }
}
