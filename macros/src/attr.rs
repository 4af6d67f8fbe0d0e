//! The attribute's keys, parsed into typed values that keep their literal's span.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Lit, LitStr};

use agent_airlock_grammar::{MaskSet, Rate, Segment, check_tool_name, parse_effect_template};

use crate::ctxt::Ctxt;

/// What the attribute says; every knob is absent or a value with the span of its literal.
#[derive(Default)]
pub(crate) struct Attrs {
    pub(crate) name: Option<(String, Span)>,
    pub(crate) description: Option<(String, Span)>,
    pub(crate) escalate: Option<(String, Span)>,
    pub(crate) rate: Option<(Rate, Span)>,
    pub(crate) ghost: Option<(Ghost, Span)>,
    /// The effect template and its literal (checked against the parameters once they are known).
    pub(crate) effect: Option<(Vec<EffectPiece>, LitStr)>,
    /// The mask sets.
    pub(crate) mask: Option<(MaskSet, Span)>,
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

/// One piece of an effect template: literal text, or the name of a parameter.
pub(crate) enum EffectPiece {
    Literal(String),
    Param(String),
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
                Err(err) => cx.error_spanned_by(&lit, err),
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
            "rate" => match text.parse::<Rate>() {
                Ok(rate) => attrs.rate = Some((rate, span)),
                Err(err) => cx.error_spanned_by(&lit, err),
            },
            "ghost" => match text.as_str() {
                "strip" => attrs.ghost = Some((Ghost::Strip, span)),
                "block" => attrs.ghost = Some((Ghost::Block, span)),
                other => {
                    cx.error_spanned_by(&lit, format!("unknown ghost mode `{other}`, expected one of `strip`, `block`"))
                }
            },
            "effect" => match parse_effect_template(&text) {
                Ok(segments) => {
                    let pieces = segments
                        .into_iter()
                        .map(|segment| match segment {
                            Segment::Literal(text) => EffectPiece::Literal(text.to_owned()),
                            Segment::Param(name) => EffectPiece::Param(name.to_owned()),
                        })
                        .collect();
                    attrs.effect = Some((pieces, lit.clone()));
                }
                Err(err) => cx.error_spanned_by(&lit, err),
            },
            "mask" => match text.parse::<MaskSet>() {
                Ok(set) => attrs.mask = Some((set, span)),
                Err(err) => cx.error_spanned_by(&lit, err),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_key() {
        assert!(unknown_key_message("escalte").contains("did you mean `escalate`"));
        assert!(unknown_key_message("rates").contains("did you mean `rate`"));
        assert!(!unknown_key_message("zzzzzzzz").contains("did you mean"));
    }
}
