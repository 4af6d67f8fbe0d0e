//! The checks that need both the attribute and the signature. Every mistake is recorded in the `Ctxt`;
//! what comes out is a checked model that code generation can trust.

use proc_macro2::TokenStream;

use crate::ast::{Doc, Param, ToolFn, param_key};
use crate::attr::{Attrs, EffectPiece, Key};
use crate::ctxt::Ctxt;

const MISSING_DESCRIPTION: &str =
    "a tool needs a description for the model: write a doc comment on the function or `description = \"...\"`";

/// A tool whose attribute and signature passed every check.
pub(crate) struct Checked<'a> {
    pub(crate) func: &'a ToolFn,
    pub(crate) attrs: &'a Attrs,
    pub(crate) params: Vec<Param>,
    /// The registered name.
    pub(crate) name: String,
    /// What the model reads.
    pub(crate) description: Doc,
}

/// Runs the remaining checks and consumes `cx`: the checked model, or every error folded into one.
pub(crate) fn check<'a>(
    cx: Ctxt,
    attrs: &'a Attrs,
    func: &'a ToolFn,
    params: Vec<Param>,
) -> Result<Checked<'a>, TokenStream> {
    check_effect_params(&cx, attrs, &params);
    // On a mistake the value is a placeholder and the error is recorded, so `cx.check()` below fails and
    // the placeholder never reaches generated code.
    let description = match &attrs.description {
        Some(text) => Doc::Text(text.clone()),
        None => ast_doc_or_error(&cx, attrs, func),
    };
    let name = match &attrs.name {
        Some(name) => name.clone(),
        // Already reported at the attribute's value.
        None if attrs.wrote(Key::Name) => String::new(),
        None => {
            let name = param_key(&func.sig.ident);
            if let Err(err) = agent_airlock_grammar::check_tool_name(&name) {
                cx.error_spanned_by(&func.sig.ident, format!("{err}; set `name = \"...\"`"));
            }
            name
        }
    };
    cx.check()?;
    Ok(Checked { func, attrs, params, name, description })
}

/// The function's doc comment; when it has none, the error (unless `description = ...` was written and
/// already reported at its value).
fn ast_doc_or_error(cx: &Ctxt, attrs: &Attrs, func: &ToolFn) -> Doc {
    crate::ast::doc(&func.attrs).unwrap_or_else(|| {
        if !attrs.wrote(Key::Description) {
            cx.error_spanned_by(&func.sig.ident, MISSING_DESCRIPTION);
        }
        Doc::Text(String::new())
    })
}

/// Every `{name}` of the effect template must be a model-visible parameter.
fn check_effect_params(cx: &Ctxt, attrs: &Attrs, params: &[Param]) {
    let Some((segments, lit)) = &attrs.effect else { return };
    for segment in segments {
        let EffectPiece::Param(name) = segment else { continue };
        match params.iter().find(|p| param_key(&p.ident) == *name) {
            Some(param) if param.injected => cx.error_spanned_by(
                lit,
                format!("`{name}` is injected by the host; an effect key can only use the model's arguments"),
            ),
            Some(_) => {}
            None => {
                let visible: Vec<String> =
                    params.iter().filter(|p| !p.injected).map(|p| format!("`{}`", param_key(&p.ident))).collect();
                let expected = if visible.is_empty() {
                    "the tool has no model-visible parameters".to_owned()
                } else {
                    format!("expected one of {}", visible.join(", "))
                };
                cx.error_spanned_by(lit, format!("unknown parameter `{name}` in effect template, {expected}"));
            }
        }
    }
}
