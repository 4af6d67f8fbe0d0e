//! The tool function as the macro sees it: attributes, visibility and signature parsed, the body kept as
//! raw tokens (as tracing-attributes' `MaybeItemFn` does), and the parameters split into model-visible and
//! injected. The macro never needs the body: a syntax error in it is the compiler's to report, once, and
//! the tool type is still generated from the signature.

use proc_macro2::{Group, TokenStream};
use quote::{ToTokens, TokenStreamExt, quote};
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, FnArg, Pat, Signature, Type, Visibility};

use crate::ctxt::Ctxt;

/// A function item whose body is not parsed.
pub(crate) struct ToolFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// `{ ... }`, exactly as written.
    pub(crate) body: Group,
}

impl Parse for ToolFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let body: Group = input.parse()?;
        if body.delimiter() != proc_macro2::Delimiter::Brace {
            return Err(syn::Error::new(body.span(), "expected the function's body"));
        }
        Ok(ToolFn { attrs, vis, sig, body })
    }
}

impl ToTokens for ToolFn {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.append_all(&self.attrs);
        self.vis.to_tokens(tokens);
        self.sig.to_tokens(tokens);
        self.body.to_tokens(tokens);
    }
}

/// One parameter of the tool function.
pub(crate) struct Param {
    pub(crate) ident: syn::Ident,
    pub(crate) ty: Type,
    pub(crate) doc: Option<Doc>,
    pub(crate) injected: bool,
}

/// Reads the parameters of `func`, recording every unsupported shape in `cx`.
pub(crate) fn params(cx: &Ctxt, func: &ToolFn) -> Vec<Param> {
    let sig = &func.sig;
    if !sig.generics.params.is_empty() {
        // Spans `<...>` only; a `where` clause on a generic function is part of the same mistake.
        cx.error_spanned_by(
            &sig.generics,
            "a tool function cannot be generic: the model's arguments need one concrete type per parameter",
        );
    } else if let Some(where_clause) = &sig.generics.where_clause {
        cx.error_spanned_by(
            where_clause,
            "a tool function cannot have a `where` clause: its parameters must be concrete types",
        );
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a tool function cannot be variadic");
    }
    if let syn::Safety::Unsafe(unsafety) = &sig.safety {
        cx.error_spanned_by(unsafety, "a tool function cannot be `unsafe`: the dispatcher calls it with model input");
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(abi, "a tool function cannot declare an ABI");
    }
    if let Some(constness) = &sig.constness {
        cx.error_spanned_by(constness, "a tool function cannot be `const`");
    }

    let mut params = Vec::new();
    for input in &sig.inputs {
        let pat_type = match input {
            FnArg::Receiver(receiver) => {
                cx.error_spanned_by(
                    receiver,
                    "a tool must be a free function, not a method taking `self`; pass shared state with `#[inject]`",
                );
                continue;
            }
            FnArg::Typed(pat_type) => pat_type,
        };
        if let Some(cfg) = pat_type.attrs.iter().find(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr")) {
            cx.error_spanned_by(
                cfg,
                "a tool parameter cannot be conditional: the schema and the call need the same parameters",
            );
        }
        let injected = inject_marker(cx, &pat_type.attrs);
        let doc = doc(&pat_type.attrs);
        let ident = match &*pat_type.pat {
            Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => pat.ident.clone(),
            other => {
                cx.error_spanned_by(
                    other,
                    "a tool parameter must be a plain name such as `path: String`: its name is the argument's key",
                );
                continue;
            }
        };
        if let Some(impl_trait) = find_type(&pat_type.ty, &|ty| matches!(ty, Type::ImplTrait(_))) {
            cx.error_spanned_by(
                impl_trait,
                "a tool parameter cannot be `impl Trait`: the model's arguments need a concrete type",
            );
            continue;
        }
        // The host's values are owned too, and the model's arguments are deserialized into owned values
        // all the way down (a `&str` inside a `Vec` borrows from a buffer that is gone when the tool runs).
        let reference = if injected {
            Some(&*pat_type.ty).filter(|ty| matches!(ty, Type::Reference(_)))
        } else {
            find_type(&pat_type.ty, &|ty| matches!(ty, Type::Reference(_)))
        };
        if let Some(reference) = reference {
            let message = if injected {
                "an injected parameter must be an owned type such as `State<T>` or `CallContext`"
            } else {
                "a tool parameter must be an owned type such as `String`: the arguments are deserialized into it"
            };
            cx.error_spanned_by(reference, message);
            continue;
        }
        params.push(Param { ident, ty: (*pat_type.ty).clone(), doc, injected });
    }
    params
}

/// The argument key of a parameter (and the tool name of a function): its name without a raw-identifier
/// prefix.
pub(crate) fn param_key(ident: &syn::Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").unwrap_or(&name).to_owned()
}

/// Whether the parameter carries `#[inject]`; misuse of the marker is recorded in `cx`.
fn inject_marker(cx: &Ctxt, attrs: &[Attribute]) -> bool {
    let mut found = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("inject")) {
        if found {
            cx.error_spanned_by(attr, "duplicate `#[inject]` marker");
            continue;
        }
        found = true;
        if !matches!(attr.meta, syn::Meta::Path(_)) {
            cx.error_spanned_by(
                &attr.meta,
                "`#[inject]` takes no arguments: the parameter's type decides what the host supplies",
            );
        }
    }
    found
}

/// The attributes rustc must not see on a parameter (ours and doc comments, which rustc rejects there).
pub(crate) fn is_param_attribute_we_consume(attr: &Attribute) -> bool {
    attr.path().is_ident("inject") || attr.path().is_ident("doc")
}

/// A description from doc comments: text known now, or (when a doc attribute is a macro call such as
/// `#[doc = include_str!("refund.md")]`) tokens that produce it when the crate compiles.
pub(crate) enum Doc {
    Text(String),
    Concat(TokenStream),
}

impl ToTokens for Doc {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            Doc::Text(text) => text.to_tokens(tokens),
            Doc::Concat(concat) => concat.to_tokens(tokens),
        }
    }
}

/// The doc comment of an item or parameter, or `None` if it has none or it is blank.
pub(crate) fn doc(attrs: &[Attribute]) -> Option<Doc> {
    let mut parts = Vec::new();
    let mut all_text = true;
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        // `#[doc(hidden)]` and the like say nothing.
        let syn::Meta::NameValue(nv) = &attr.meta else { continue };
        let mut value = &nv.value;
        // A `$doc:expr` from a `macro_rules!` arrives wrapped in an invisible group.
        while let syn::Expr::Group(group) = value {
            value = &group.expr;
        }
        all_text &= matches!(value, syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(_), .. }));
        parts.push(value);
    }
    if all_text {
        let texts = parts.iter().filter_map(|part| match part {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        });
        return doc_text(texts).map(Doc::Text);
    }
    // Each doc attribute is a line, as rustdoc reads them; a literal loses the space after `///`.
    let mut lines = Vec::with_capacity(parts.len() * 2);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            lines.push(quote!("\n"));
        }
        lines.push(match part {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => {
                let text = s.value();
                let text = text.split('\n').map(|l| l.strip_prefix(' ').unwrap_or(l)).collect::<Vec<_>>().join("\n");
                quote!(#text)
            }
            other => quote!(#other),
        });
    }
    Some(Doc::Concat(quote!(::core::concat!(#(#lines),*))))
}

/// Doc comment lines joined, with the common indentation removed and the whole trimmed; `None` if blank.
fn doc_text(texts: impl Iterator<Item = String>) -> Option<String> {
    // `split`, not `lines`: an empty `///` line is an empty string and must stay a (paragraph-breaking) line.
    let lines: Vec<String> = texts
        .flat_map(|s| s.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned()).collect::<Vec<_>>())
        .collect();
    let indent =
        lines.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    let text = lines
        // Indentation is counted in bytes; a line indented with other (multi-byte) whitespace is trimmed
        // whole rather than cut inside a character.
        .iter()
        .map(|l| l.get(indent..).unwrap_or_else(|| l.trim_start()))
        .collect::<Vec<_>>()
        .join("\n");
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// The first type in `ty` (itself included, outermost first) that `matches`.
fn find_type<'a>(ty: &'a Type, matches: &dyn Fn(&Type) -> bool) -> Option<&'a Type> {
    if matches(ty) {
        return Some(ty);
    }
    match ty {
        Type::Reference(r) => find_type(&r.elem, matches),
        Type::Paren(p) => find_type(&p.elem, matches),
        Type::Group(g) => find_type(&g.elem, matches),
        Type::Slice(s) => find_type(&s.elem, matches),
        Type::Array(a) => find_type(&a.elem, matches),
        Type::Ptr(p) => find_type(&p.elem, matches),
        Type::Tuple(t) => t.elems.iter().find_map(|elem| find_type(elem, matches)),
        Type::Path(p) => p
            .qself
            .as_ref()
            .and_then(|qself| find_type(&qself.ty, matches))
            .or_else(|| p.path.segments.iter().find_map(|seg| find_type_in_arguments(&seg.arguments, matches))),
        _ => None,
    }
}

fn find_type_in_arguments<'a>(arguments: &'a syn::PathArguments, matches: &dyn Fn(&Type) -> bool) -> Option<&'a Type> {
    match arguments {
        syn::PathArguments::AngleBracketed(args) => args.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::Type(ty) => find_type(ty, matches),
            syn::GenericArgument::AssocType(assoc) => find_type(&assoc.ty, matches),
            _ => None,
        }),
        syn::PathArguments::Parenthesized(args) => {
            args.inputs.iter().find_map(|arg| find_type(&arg.ty, matches)).or(match &args.output {
                syn::ReturnType::Type(_, ty) => find_type(ty, matches),
                syn::ReturnType::Default => None,
            })
        }
        syn::PathArguments::None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[&str]) -> Option<String> {
        doc_text(lines.iter().map(|l| (*l).to_owned()))
    }

    #[test]
    fn doc_comments_lose_their_common_indentation() {
        assert_eq!(
            text(&[" Refund a payment.", "", " ```", "     code", " ```"]).as_deref(),
            Some("Refund a payment.\n\n```\n    code\n```")
        );
        assert_eq!(text(&[" ", "   "]), None);
        assert_eq!(text(&[]), None);
    }

    #[test]
    fn multi_byte_indentation_is_never_cut_inside_a_character() {
        // Two ASCII spaces set the indentation to 2 bytes; the second line starts with a 3-byte space.
        assert_eq!(text(&["  a", "\u{3000}b"]).as_deref(), Some("a\nb"));
    }

    #[test]
    fn macro_doc_attributes_become_a_concat() {
        let attrs: Vec<Attribute> = vec![
            syn::parse_quote!(#[doc = " Refund."]),
            syn::parse_quote!(#[doc = include_str!("refund.md")]),
            syn::parse_quote!(#[doc(hidden)]),
        ];
        let Some(Doc::Concat(tokens)) = doc(&attrs) else { panic!("expected a concat") };
        assert_eq!(tokens.to_string(), quote!(::core::concat!("Refund.", "\n", include_str!("refund.md"))).to_string());
    }
}
