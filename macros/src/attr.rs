//! The attribute's keys, parsed into typed values that keep their literal's span.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::{Expr, ExprLit, Lit, LitStr};

use crate::ctxt::Ctxt;
use crate::rate::{self, Rate};

/// What the attribute says; every knob is absent or a value with the span of its literal.
#[derive(Default)]
pub(crate) struct Attrs {
    pub(crate) name: Option<(String, Span)>,
    pub(crate) description: Option<(String, Span)>,
    pub(crate) escalate: Option<(String, Span)>,
    pub(crate) rate: Option<(Rate, Span)>,
    pub(crate) ghost: Option<(Ghost, Span)>,
    pub(crate) krate: Option<syn::Path>,
}

/// What happens to arguments the model sent that the tool does not declare.
#[derive(Clone, Copy)]
pub(crate) enum Ghost {
    Strip,
    Block,
}

const KEYS: &[&str] = &["name", "description", "escalate", "rate", "ghost", "crate"];

/// Parses the attribute's arguments, recording every error in `cx`.
pub(crate) fn parse(cx: &Ctxt, args: TokenStream) -> Attrs {
    let mut attrs = Attrs::default();
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_else(|| {
                meta.path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect::<Vec<_>>()
                    .join("::")
            });
        // Every key takes `= value`; read the value as any expression so a wrong kind of value is
        // reported as such, never as a confusing parse error.
        let value: Option<Expr> = if meta.input.peek(syn::Token![=]) {
            Some(meta.value()?.parse()?)
        } else {
            None
        };
        if !KEYS.contains(&key.as_str()) {
            cx.error_spanned_by(&meta.path, unknown_key_message(&key));
            return Ok(());
        }
        if seen.contains(&key) {
            cx.error_spanned_by(&meta.path, format!("duplicate `{key}` key"));
            return Ok(());
        }
        seen.push(key.clone());
        let Some(value) = value else {
            cx.error_spanned_by(
                &meta.path,
                format!("`{key}` needs a value: `{key} = \"...\"`"),
            );
            return Ok(());
        };
        if key == "crate" {
            match string_literal(&value) {
                Some(lit) => match lit.parse::<syn::Path>() {
                    Ok(path) => attrs.krate = Some(path),
                    Err(_) => cx
                        .error_spanned_by(&lit, "`crate` must be a path such as `::agent_airlock`"),
                },
                None => cx.error_spanned_by(
                    &value,
                    "`crate` expects a string literal: `crate = \"::my_runtime\"`",
                ),
            }
            return Ok(());
        }
        let Some(lit) = string_literal(&value) else {
            cx.error_spanned_by(
                &value,
                format!("`{key}` expects a string literal: `{key} = \"...\"`"),
            );
            return Ok(());
        };
        let (text, span) = (lit.value(), lit.span());
        match key.as_str() {
            "name" => match check_tool_name(&text) {
                Ok(()) => attrs.name = Some((text, span)),
                Err(message) => cx.error_spanned_by(&lit, message),
            },
            "description" => {
                if text.trim().is_empty() {
                    cx.error_spanned_by(&lit, "`description` must not be empty");
                } else {
                    attrs.description = Some((text, span));
                }
            }
            "escalate" => {
                if text.trim().is_empty() {
                    cx.error_spanned_by(
                        &lit,
                        "`escalate` must give the reason a human must approve, e.g. `escalate = \"moves money\"`",
                    );
                } else {
                    attrs.escalate = Some((text, span));
                }
            }
            "rate" => match rate::parse(&text) {
                Ok(rate) => attrs.rate = Some((rate, span)),
                Err(message) => cx.error_spanned_by(&lit, message),
            },
            "ghost" => match text.as_str() {
                "strip" => attrs.ghost = Some((Ghost::Strip, span)),
                "block" => attrs.ghost = Some((Ghost::Block, span)),
                other => cx.error_spanned_by(
                    &lit,
                    format!("unknown ghost mode `{other}`, expected one of `strip`, `block`"),
                ),
            },
            // `crate` was handled above and `KEYS` holds nothing else.
            _ => {}
        }
        Ok(())
    });
    if let Err(err) = parser.parse2(args) {
        cx.syn_error(err);
    }
    attrs
}

fn string_literal(expr: &Expr) -> Option<LitStr> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit.clone()),
        Expr::Group(group) => string_literal(&group.expr),
        _ => None,
    }
}

fn unknown_key_message(key: &str) -> String {
    let expected = KEYS
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let closest = KEYS
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k), *k))
        .filter(|(distance, k)| *distance <= 2.max(k.len() / 3))
        .min();
    match closest {
        Some((_, k)) => {
            format!("unknown key `{key}`, did you mean `{k}`? expected one of {expected}")
        }
        None => format!("unknown key `{key}`, expected one of {expected}"),
    }
}

/// The strictest provider rule for tool names: `^[a-zA-Z0-9_-]{1,64}$`.
pub(crate) fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "tool name `{name}` must be 1 to 64 characters long (it has {})",
            name.chars().count()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "tool name `{name}` contains `{bad}`, only ASCII letters, digits, `_` and `-` are accepted by every provider"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_key() {
        assert!(unknown_key_message("escalte").contains("did you mean `escalate`"));
        assert!(unknown_key_message("rates").contains("did you mean `rate`"));
        assert!(!unknown_key_message("zzzzzzzz").contains("did you mean"));
    }

    #[test]
    fn tool_names_follow_the_strictest_provider_rule() {
        assert!(check_tool_name("delete_file-2").is_ok());
        assert!(check_tool_name(&"a".repeat(64)).is_ok());
        assert!(check_tool_name(&"a".repeat(65)).is_err());
        assert!(check_tool_name("").is_err());
        assert!(check_tool_name("has space").unwrap_err().contains("` `"));
        assert!(check_tool_name("dot.name").is_err());
        assert!(check_tool_name("ünï").is_err());
    }
}
