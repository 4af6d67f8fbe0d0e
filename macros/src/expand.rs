//! Code generation: the original function, a hidden tool type, and one impl of the runtime's `Tool` trait.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ItemFn;
use syn::spanned::Spanned;

use crate::ast::{self, Param};
use crate::attr::{self, Attrs, Ghost};
use crate::ctxt::Ctxt;

pub(crate) fn airlock_tool(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut func: ItemFn = match syn::parse2(input.clone()) {
        Ok(func) => func,
        Err(err) => {
            // Not a free function: say so and give the tokens back unchanged.
            let message = syn::Error::new(
                err.span(),
                "`#[airlock_tool]` applies to a free `fn` or `async fn` item",
            );
            let error = message.to_compile_error();
            return quote!(#error #input);
        }
    };
    let cx = Ctxt::new();
    let attrs = attr::parse(&cx, args);
    let params = ast::params(&cx, &func);
    let description = attrs
        .description
        .as_ref()
        .map(|(text, _)| text.clone())
        .or_else(|| ast::doc_string(&func.attrs));
    if description.is_none() {
        cx.error_spanned_by(
            &func.sig.ident,
            "a tool needs a description for the model: write a doc comment on the function or `description = \"...\"`",
        );
    }
    let name = match &attrs.name {
        Some((name, _)) => name.clone(),
        None => {
            let name = func.sig.ident.to_string();
            let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
            if let Err(message) = attr::check_tool_name(&name) {
                cx.error_spanned_by(&func.sig.ident, format!("{message}; set `name = \"...\"`"));
            }
            name
        }
    };
    strip_parameter_attributes(&mut func);
    if let Err(errors) = cx.check() {
        return fallback(&func, errors);
    }
    let description = description.unwrap_or_default();
    let tool = generate(&func, &attrs, &params, &name, &description);
    quote! {
        #func
        #tool
    }
}

/// On error: the function as written (minus our markers) plus the errors, so nothing cascades.
fn fallback(func: &ItemFn, errors: TokenStream) -> TokenStream {
    quote! {
        #errors
        #func
    }
}

/// Doc comments on parameters and `#[inject]` are ours; rustc must not see them.
fn strip_parameter_attributes(func: &mut ItemFn) {
    for input in &mut func.sig.inputs {
        if let syn::FnArg::Typed(pat_type) = input {
            pat_type
                .attrs
                .retain(|a| !ast::is_param_attribute_we_consume(a));
        }
    }
}

/// The hidden tool type's name for a function: `__airlock_tool_<fn>`.
pub(crate) fn tool_type_ident(fn_ident: &syn::Ident) -> syn::Ident {
    let name = fn_ident.to_string();
    let name = name.strip_prefix("r#").unwrap_or(&name);
    format_ident!("__airlock_tool_{}", name, span = fn_ident.span())
}

fn generate(
    func: &ItemFn,
    attrs: &Attrs,
    params: &[Param],
    name: &str,
    description: &str,
) -> TokenStream {
    let krate = attrs
        .krate
        .as_ref()
        .map(|path| quote!(#path))
        .unwrap_or_else(|| quote!(::agent_airlock));
    let private = quote!(#krate::__private);
    let vis = &func.vis;
    let fn_ident = &func.sig.ident;
    let tool_ident = tool_type_ident(fn_ident);

    let escalate = match &attrs.escalate {
        Some((reason, _)) => quote!(::core::option::Option::Some(#reason)),
        None => quote!(::core::option::Option::None),
    };
    let rate = match &attrs.rate {
        Some((rate, _)) => {
            let (count, unit) = (rate.count, rate.unit_seconds);
            quote!(::core::option::Option::Some(#krate::Rate::new_const(#count, #unit)))
        }
        None => quote!(::core::option::Option::None),
    };
    let ghost = match attrs.ghost.map(|(g, _)| g).unwrap_or(Ghost::Strip) {
        Ghost::Strip => quote!(#krate::GhostPolicy::Strip),
        Ghost::Block => quote!(#krate::GhostPolicy::Block),
    };

    let visible: Vec<&Param> = params.iter().filter(|p| !p.injected).collect();
    let param_specs = visible.iter().map(|p| {
        let key = param_key(&p.ident);
        let ty = &p.ty;
        let description = match &p.doc {
            Some(doc) => quote!(::core::option::Option::Some(#doc)),
            None => quote!(::core::option::Option::None),
        };
        // Spanned at the type: a type that cannot be an argument is reported there.
        let schema = quote_spanned!(ty.span()=> #private::param_schema::<#ty>);
        let accepts_null = quote_spanned!(ty.span()=> #private::accepts_null::<#ty>);
        quote! {
            #krate::ParamSpec {
                name: #key,
                description: #description,
                schema: #schema,
                accepts_null: #accepts_null,
            }
        }
    });

    let locals: Vec<syn::Ident> = (0..params.len())
        .map(|i| format_ident!("__airlock_arg_{}", i, span = Span::mixed_site()))
        .collect();
    let extract = params.iter().zip(&locals).map(|(p, local)| {
        let key = param_key(&p.ident);
        let ty = &p.ty;
        if p.injected {
            quote_spanned! {ty.span()=>
                let #local = #private::inject::<#ty>(__airlock_invocation, #key, &mut __airlock_errors);
            }
        } else {
            quote_spanned! {ty.span()=>
                let #local = #private::argument::<#ty>(__airlock_arguments, #key, &mut __airlock_errors);
            }
        }
    });
    let call = if func.sig.asyncness.is_some() {
        quote!(#fn_ident(#(#locals),*).await)
    } else {
        quote!(#fn_ident(#(#locals),*))
    };
    let run = quote! {
        #private::prepared(async move {
            let __airlock_returned = #call;
            {
                #[allow(unused_imports)]
                use #private::{FallibleReturn as _, PlainReturn as _};
                (&__airlock_returned).__airlock_return_kind().into_output(__airlock_returned)
            }
        })
    };
    // Every argument is extracted (collecting all errors) before any is used.
    let body = if locals.is_empty() {
        quote!(::core::result::Result::Ok(#run))
    } else {
        quote! {
            let mut __airlock_errors = #private::ArgumentErrors::new();
            #(#extract)*
            match (#(#locals,)*) {
                (#(::core::option::Option::Some(#locals),)*) => ::core::result::Result::Ok(#run),
                _ => ::core::result::Result::Err(__airlock_errors),
            }
        }
    };
    let tool_doc = format!("The `{name}` tool generated by `#[airlock_tool]` for [`{fn_ident}`].");

    quote! {
        #[doc = #tool_doc]
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #tool_ident;

        const _: () = {
            static __AIRLOCK_SPEC: #krate::ToolSpec = #krate::ToolSpec {
                name: #name,
                description: #description,
                params: &[#(#param_specs),*],
                escalate: #escalate,
                rate: #rate,
                ghost: #ghost,
            };

            impl #krate::Tool for #tool_ident {
                fn spec(&self) -> &'static #krate::ToolSpec {
                    &__AIRLOCK_SPEC
                }

                #[allow(unused_variables)]
                fn prepare(
                    &self,
                    __airlock_arguments: &#private::Arguments,
                    __airlock_invocation: &#krate::Invocation<'_>,
                ) -> ::core::result::Result<#private::PreparedCall, #private::ArgumentErrors> {
                    #body
                }
            }
        };
    }
}

/// The argument key of a parameter: its name without a raw-identifier prefix.
fn param_key(ident: &syn::Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").unwrap_or(&name).to_owned()
}

/// `tool!(path::to::f)` → `path::to::__airlock_tool_f`, a value of the generated tool type.
pub(crate) fn tool_path(input: TokenStream) -> TokenStream {
    let mut path: syn::Path = match syn::parse2(input) {
        Ok(path) => path,
        Err(err) => {
            return syn::Error::new(
                err.span(),
                "expected the path of an `#[airlock_tool]` function, e.g. `tool!(billing::refund)`",
            )
            .to_compile_error();
        }
    };
    if let Some(last) = path.segments.last_mut() {
        if !last.arguments.is_empty() {
            return syn::Error::new_spanned(
                &last.arguments,
                "a tool function has no generic arguments",
            )
            .to_compile_error();
        }
        last.ident = tool_type_ident(&last.ident);
    }
    quote!(#path)
}
