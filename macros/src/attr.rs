//! The attribute's keys, parsed into typed values that keep their literal's span.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Lit, LitStr};

use agent_airlock_grammar::{MaskSet, Rate, Segment, check_tool_name, parse_effect_template};

use crate::ctxt::Ctxt;

/// What the attribute says; every knob is absent or a checked value. Errors are spanned at the value when
/// they are found, so only the effect template, checked against the parameters later, keeps its literal.
#[derive(Default)]
pub(crate) struct Attrs {
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) escalate: Option<String>,
    pub(crate) rate: Option<Rate>,
    pub(crate) ghost: Option<Ghost>,
    /// The effect template and its literal (checked against the parameters once they are known).
    pub(crate) effect: Option<(Vec<EffectPiece>, LitStr)>,
    pub(crate) mask: Option<MaskSet>,
    pub(crate) krate: Option<syn::Path>,
    /// `crate = ...` was given but is unusable: the fallback must not guess a runtime path.
    pub(crate) krate_invalid: bool,
    /// The keys written, valid or not: a key already reported is not reported again as missing.
    pub(crate) written: Vec<Key>,
}

impl Attrs {
    pub(crate) fn wrote(&self, key: Key) -> bool {
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

/// The attribute's keys.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Name,
    Description,
    Escalate,
    Rate,
    Ghost,
    Effect,
    Mask,
    Crate,
}

impl Key {
    const ALL: [Key; 8] =
        [Key::Name, Key::Description, Key::Escalate, Key::Rate, Key::Ghost, Key::Effect, Key::Mask, Key::Crate];

    fn as_str(self) -> &'static str {
        match self {
            Key::Name => "name",
            Key::Description => "description",
            Key::Escalate => "escalate",
            Key::Rate => "rate",
            Key::Ghost => "ghost",
            Key::Effect => "effect",
            Key::Mask => "mask",
            Key::Crate => "crate",
        }
    }

    /// An example value, for the messages that show how to write the key.
    fn example(self) -> &'static str {
        match self {
            Key::Name => "\"search_docs\"",
            Key::Description => "\"Search the documentation\"",
            Key::Escalate => "\"moves money\"",
            Key::Rate => "\"10/minute\"",
            Key::Ghost => "\"block\"",
            Key::Effect => "\"refund:{payment_id}\"",
            Key::Mask => "\"secrets,pii\"",
            Key::Crate => "\"::agent_airlock\"",
        }
    }
}

/// Parses the attribute's arguments, recording every error in `cx`.
pub(crate) fn parse(cx: &Ctxt, args: TokenStream) -> Attrs {
    let mut attrs = Attrs::default();
    let parser = syn::meta::parser(|meta| {
        let value = parse_value(&meta)?;
        let Some(key) = Key::ALL.into_iter().find(|key| meta.path.is_ident(key.as_str())) else {
            cx.error_spanned_by(&meta.path, unknown_key_message(&path_text(&meta.path)));
            return Ok(());
        };
        let (name, example) = (key.as_str(), key.example());
        if attrs.wrote(key) {
            cx.error_spanned_by(&meta.path, format!("duplicate `{name}` key"));
            return Ok(());
        }
        attrs.written.push(key);
        let lit = match value {
            Value::Missing => {
                cx.error_spanned_by(&meta.path, format!("`{name}` needs a value, e.g. `{name} = {example}`"));
                None
            }
            Value::List(group) => {
                cx.error_spanned_by(group, format!("`{name}` takes `= value`, e.g. `{name} = {example}`"));
                None
            }
            Value::Expr(expr) => {
                let lit = string_literal(&expr);
                if lit.is_none() {
                    cx.error_spanned_by(&expr, format!("`{name}` expects a string literal, e.g. `{name} = {example}`"));
                }
                lit
            }
        };
        let Some(lit) = lit else {
            attrs.krate_invalid |= key == Key::Crate;
            return Ok(());
        };
        let text = lit.value();
        match key {
            Key::Name => match check_tool_name(&text) {
                Ok(()) => attrs.name = Some(text),
                Err(err) => cx.error_spanned_by(&lit, err),
            },
            Key::Description => {
                if text.trim().is_empty() {
                    cx.error_spanned_by(&lit, "`description` must not be empty: the model reads it to pick the tool");
                } else {
                    attrs.description = Some(text);
                }
            }
            Key::Escalate => {
                if text.trim().is_empty() {
                    cx.error_spanned_by(
                        &lit,
                        "`escalate` must give the reason a human must approve, e.g. `escalate = \"moves money\"`",
                    );
                } else {
                    attrs.escalate = Some(text);
                }
            }
            Key::Rate => match text.parse::<Rate>() {
                Ok(rate) => attrs.rate = Some(rate),
                Err(err) => cx.error_spanned_by(&lit, err),
            },
            Key::Ghost => match text.as_str() {
                "strip" => attrs.ghost = Some(Ghost::Strip),
                "block" => attrs.ghost = Some(Ghost::Block),
                other => {
                    cx.error_spanned_by(&lit, format!("unknown ghost mode `{other}`, expected one of `strip`, `block`"))
                }
            },
            Key::Effect => match parse_effect_template(&text) {
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
            Key::Mask => match text.parse::<MaskSet>() {
                Ok(set) => attrs.mask = Some(set),
                Err(err) => cx.error_spanned_by(&lit, err),
            },
            Key::Crate => match lit.parse::<syn::Path>() {
                Ok(path) if path.segments.iter().all(|s| s.arguments.is_none()) => attrs.krate = Some(path),
                _ => {
                    attrs.krate_invalid = true;
                    cx.error_spanned_by(
                        &lit,
                        format!("`crate` must be the path of the runtime crate, e.g. `crate = {example}`"),
                    );
                }
            },
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
    let expected = Key::ALL.map(|k| format!("`{}`", k.as_str())).join(", ");
    let closest = Key::ALL
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k.as_str()), k.as_str()))
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
