//! The `effect = "refund:{payment_id}"` template grammar: literal text and `{parameter}` placeholders.

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Literal(String),
    Param(String),
}

/// Parses a template; the error is a complete, user-facing message.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, String> {
    if template.trim().is_empty() {
        return Err("`effect` must not be empty: give an idempotency key such as `\"refund:{payment_id}\"`".into());
    }
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut chars = template.char_indices();
    while let Some((start, c)) = chars.next() {
        match c {
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    match c {
                        '}' => {
                            closed = true;
                            break;
                        }
                        '{' => return Err(format!("nested `{{` in effect template at byte {start}")),
                        c => name.push(c),
                    }
                }
                if !closed {
                    return Err(format!("unclosed `{{` in effect template at byte {start}"));
                }
                let name = name.trim().to_owned();
                if name.is_empty() {
                    return Err("empty `{}` in effect template: name a parameter, e.g. `{payment_id}`".into());
                }
                if !literal.is_empty() {
                    segments.push(Segment::Literal(std::mem::take(&mut literal)));
                }
                segments.push(Segment::Param(name));
            }
            '}' => return Err(format!("unmatched `}}` in effect template at byte {start}")),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    if !segments.iter().any(|s| matches!(s, Segment::Param(_))) {
        return Err("an effect template needs at least one `{parameter}`, or every call would share one key".into());
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_literals_and_params() {
        assert_eq!(
            parse("refund:{payment_id}/{ amount }").unwrap(),
            vec![
                Segment::Literal("refund:".into()),
                Segment::Param("payment_id".into()),
                Segment::Literal("/".into()),
                Segment::Param("amount".into()),
            ]
        );
    }

    #[test]
    fn rejects_each_malformed_template() {
        assert!(parse("").unwrap_err().contains("must not be empty"));
        assert!(parse("refund:{id").unwrap_err().contains("unclosed"));
        assert!(parse("refund:id}").unwrap_err().contains("unmatched"));
        assert!(parse("refund:{}").unwrap_err().contains("empty `{}`"));
        assert!(parse("refund:{a{b}}").unwrap_err().contains("nested"));
        assert!(parse("refund").unwrap_err().contains("at least one"));
    }
}
