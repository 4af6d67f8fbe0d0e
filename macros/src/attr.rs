//! The attribute's keys, parsed into typed values that keep their literal's span.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Lit, LitStr};

use crate::ctxt::Ctxt;
use crate::effect;
use crate::rate::{self, Rate};

/// What the attribute says; every knob is absent or a value with the span of its literal.
#[derive(Default)]
pub(crate) struct Attrs {
    pub(crate) name: Option<(String, Span)>,
    pub(crate) description: Option<(String, Span)>,
    pub(crate) escalate: Option<(String, Span)>,
    pub(crate) rate: Option<(Rate, Span)>,
    pub(crate) ghost: Option<(Ghost, Span)>,
    /// The effect template and its literal (checked against the parameters once they are known).
    pub(crate) effect: Option<(Vec<effect::Segment>, LitStr)>,
    /// The mask sets, as written (names checked here).
    pub(crate) mask: Option<(String, Span)>,
    pub(crate) krate: Option<syn::Path>,
    /// `crate = ...` was given but is unusable: the fallback must not guess a runtime path.
    pub(crate) krate_invalid: bool,
    /// The keys written, valid or not: a key already reported is not reported again as missing.
    pub(crate) written: Vec<&'static str>,
}

impl Attrs {
    pub(crate) fn wrote(&self, key: &str) -> bool {
        self.written.contains(&key)
    }
}

/// What happens to arguments the model sent that the tool does not declare.
#[derive(Clone, Copy)]
pub(crate) enum Ghost {
    Strip,
    Block,
}

/// Every key, with an example value for the messages that show how to write it.
const KEYS: &[(&str, &str)] = &[
    ("name", "\"search_docs\""),
    ("description", "\"Search the documentation\""),
    ("escalate", "\"moves money\""),
    ("rate", "\"10/minute\""),
    ("ghost", "\"block\""),
    ("effect", "\"refund:{payment_id}\""),
    ("mask", "\"secrets,pii\""),
    ("crate", "\"::agent_airlock\""),
];

/// Parses the attribute's arguments, recording every error in `cx`.
pub(crate) fn parse(cx: &Ctxt, args: TokenStream) -> Attrs {
    let mut attrs = Attrs::default();
    let parser = syn::meta::parser(|meta| {
        let value = parse_value(&meta)?;
        let Some(&(key, example)) = KEYS.iter().find(|(key, _)| meta.path.is_ident(key)) else {
            cx.error_spanned_by(&meta.path, unknown_key_message(&path_text(&meta.path)));
            return Ok(());
        };
        if attrs.wrote(key) {
            cx.error_spanned_by(&meta.path, format!("duplicate `{key}` key"));
            return Ok(());
        }
        attrs.written.push(key);
        let lit = match value {
            Value::Missing => {
                cx.error_spanned_by(&meta.path, format!("`{key}` needs a value, e.g. `{key} = {example}`"));
                None
            }
            Value::List(group) => {
                cx.error_spanned_by(group, format!("`{key}` takes `= value`, e.g. `{key} = {example}`"));
                None
            }
            Value::Expr(expr) => {
                let lit = string_literal(&expr);
                if lit.is_none() {
                    cx.error_spanned_by(&expr, format!("`{key}` expects a string literal, e.g. `{key} = {example}`"));
                }
                lit
            }
        };
        let Some(lit) = lit else {
            attrs.krate_invalid |= key == "crate";
            return Ok(());
        };
        let (text, span) = (lit.value(), lit.span());
        match key {
            "name" => match check_tool_name(&text) {
                Ok(()) => attrs.name = Some((text, span)),
                Err(message) => cx.error_spanned_by(&lit, message),
            },
            "description" => {
                if text.trim().is_empty() {
                    cx.error_spanned_by(&lit, "`description` must not be empty: the model reads it to pick the tool");
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
                other => {
                    cx.error_spanned_by(&lit, format!("unknown ghost mode `{other}`, expected one of `strip`, `block`"))
                }
            },
            "effect" => match effect::parse(&text) {
                Ok(segments) => attrs.effect = Some((segments, lit.clone())),
                Err(message) => cx.error_spanned_by(&lit, message),
            },
            "mask" => match check_mask(&text) {
                Ok(()) => attrs.mask = Some((text, span)),
                Err(message) => cx.error_spanned_by(&lit, message),
            },
            "crate" => match lit.parse::<syn::Path>() {
                Ok(path) if path.segments.iter().all(|s| s.arguments.is_none()) => attrs.krate = Some(path),
                _ => {
                    attrs.krate_invalid = true;
                    cx.error_spanned_by(
                        &lit,
                        format!("`crate` must be the path of the runtime crate, e.g. `crate = {example}`"),
                    );
                }
            },
            // `KEYS` holds nothing else.
            _ => {}
        }
        Ok(())
    });
    if let Err(err) = parser.parse2(args) {
        cx.syn_error(err);
    }
    attrs
}

/// What follows a key.
enum Value {
    /// `key` alone.
    Missing,
    /// `key(...)`: consumed whole so parsing goes on after it.
    List(TokenStream),
    /// `key = <expr>`, read as any expression so a wrong kind of value is reported as such, never as a
    /// confusing parse error.
    Expr(Expr),
}

fn parse_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Value> {
    if meta.input.peek(syn::Token![=]) {
        return Ok(Value::Expr(meta.value()?.parse()?));
    }
    if meta.input.peek(syn::token::Paren) {
        let group: proc_macro2::Group = meta.input.parse()?;
        return Ok(Value::List(group.into_token_stream()));
    }
    Ok(Value::Missing)
}

fn path_text(path: &syn::Path) -> String {
    let segments = path.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>().join("::");
    if path.leading_colon.is_some() { format!("::{segments}") } else { segments }
}

fn string_literal(expr: &Expr) -> Option<LitStr> {
    match expr {
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => Some(lit.clone()),
        Expr::Group(group) => string_literal(&group.expr),
        _ => None,
    }
}

fn unknown_key_message(key: &str) -> String {
    let expected = KEYS.iter().map(|(k, _)| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    let closest = KEYS
        .iter()
        .map(|(k, _)| (strsim::damerau_levenshtein(key, k), *k))
        .filter(|(distance, k)| *distance <= 2.max(k.len() / 3))
        .min();
    match closest {
        Some((_, k)) => format!("unknown key `{key}`, did you mean `{k}`? expected one of {expected}"),
        None => format!("unknown key `{key}`, expected one of {expected}"),
    }
}

/// Every name `mask = "..."` accepts; kept equal to the runtime's `mask::MASK_SET_NAMES` by a test.
pub(crate) const MASK_SET_NAMES: &[&str] = &[
    "none",
    "all",
    "secrets",
    "pii",
    "private_key",
    "jwt",
    "bearer_token",
    "anthropic_key",
    "openai_key",
    "google_api_key",
    "github_token",
    "slack_token",
    "stripe_key",
    "aws_access_key",
    "connection_password",
    "secret_value",
    "email",
    "phone",
    "payment_card",
    "iban",
    "us_ssn",
    "ip_address",
];

/// `mask = "secrets,pii"`: a comma-separated list of known names; `none` stands alone.
fn check_mask(text: &str) -> Result<(), String> {
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    for name in &names {
        if name.is_empty() {
            return Err(format!("empty name in `mask = \"{text}\"`, expected names separated by commas"));
        }
        if !MASK_SET_NAMES.contains(name) {
            let expected = ["none", "all", "secrets", "pii"].map(|n| format!("`{n}`")).join(", ");
            return Err(format!(
                "unknown mask `{name}`, expected one of {expected} or a kind such as `email`, `payment_card`"
            ));
        }
    }
    if names.len() > 1 && names.contains(&"none") {
        return Err("`none` cannot be combined with other masks".into());
    }
    Ok(())
}

/// The strictest provider rule for tool names: `^[a-zA-Z0-9_-]{1,64}$`.
pub(crate) fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("tool name must not be empty".to_owned());
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!(
            "tool name `{name}` contains `{bad}`, only ASCII letters, digits, `_` and `-` are accepted by every provider"
        ));
    }
    // Only ASCII is left, so bytes are characters.
    if name.len() > 64 {
        return Err(format!("tool name `{name}` is {} characters long, the limit is 64", name.len()));
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
        assert!(check_tool_name("has space").expect_err("invalid").contains("` `"));
        assert!(check_tool_name("dot.name").is_err());
        assert!(check_tool_name("ünï").expect_err("invalid").contains("`ü`"));
        assert!(check_tool_name(&"é".repeat(40)).expect_err("invalid").contains("`é`"));
        assert!(check_tool_name(&"a".repeat(65)).expect_err("invalid").contains("65 characters"));
    }
}
