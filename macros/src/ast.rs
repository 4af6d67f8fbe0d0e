//! The tool function as the macro sees it: its parameters, split into model-visible and injected.

use syn::{Attribute, FnArg, ItemFn, Pat, Type};

use crate::ctxt::Ctxt;

/// One parameter of the tool function.
pub(crate) struct Param {
    pub(crate) ident: syn::Ident,
    pub(crate) ty: Type,
    pub(crate) doc: Option<String>,
    pub(crate) injected: bool,
}

/// Reads the parameters of `func`, recording every unsupported shape in `cx`.
pub(crate) fn params(cx: &Ctxt, func: &ItemFn) -> Vec<Param> {
    let sig = &func.sig;
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            "a tool function cannot be generic: the model's arguments need one concrete type per parameter",
        );
    }
    if let Some(where_clause) = &sig.generics.where_clause {
        cx.error_spanned_by(where_clause, "a tool function cannot have a `where` clause");
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a tool function cannot be variadic");
    }
    if let syn::Safety::Unsafe(unsafety) = &sig.safety {
        cx.error_spanned_by(
            unsafety,
            "a tool function cannot be `unsafe`: the dispatcher calls it with model input",
        );
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
        let injected = inject_marker(cx, &pat_type.attrs);
        let doc = doc_string(&pat_type.attrs);
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
        if let Some(impl_trait) = find_impl_trait(&pat_type.ty) {
            cx.error_spanned_by(
                impl_trait,
                "a tool parameter cannot be `impl Trait`: the model's arguments need a concrete type",
            );
            continue;
        }
        if matches!(&*pat_type.ty, Type::Reference(_)) {
            let message = if injected {
                "an injected parameter must be an owned type such as `State<T>` or `CallContext`"
            } else {
                "a tool parameter must be an owned type such as `String`: the arguments are deserialized into it"
            };
            cx.error_spanned_by(&pat_type.ty, message);
            continue;
        }
        params.push(Param {
            ident,
            ty: (*pat_type.ty).clone(),
            doc,
            injected,
        });
    }
    params
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

/// The doc comment's text, with the common indentation removed, or `None` if it is empty.
pub(crate) fn doc_string(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|s| s.lines().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let text = lines
        .iter()
        .map(|l| {
            if l.len() >= indent {
                &l[indent..]
            } else {
                l.trim_start()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn find_impl_trait(ty: &Type) -> Option<&Type> {
    match ty {
        Type::ImplTrait(_) => Some(ty),
        Type::Reference(r) => find_impl_trait(&r.elem),
        Type::Paren(p) => find_impl_trait(&p.elem),
        Type::Group(g) => find_impl_trait(&g.elem),
        Type::Slice(s) => find_impl_trait(&s.elem),
        Type::Array(a) => find_impl_trait(&a.elem),
        Type::Ptr(p) => find_impl_trait(&p.elem),
        Type::Tuple(t) => t.elems.iter().find_map(find_impl_trait),
        Type::Path(p) => p.path.segments.iter().find_map(|seg| match &seg.arguments {
            syn::PathArguments::AngleBracketed(args) => {
                args.args.iter().find_map(|arg| match arg {
                    syn::GenericArgument::Type(t) => find_impl_trait(t),
                    _ => None,
                })
            }
            _ => None,
        }),
        _ => None,
    }
}
